"""Roofline bytes of element-wise calls as the kernels move them: an ``out=`` call writes its ``out`` tensor without
reading it, and the output of mixed dtypes has the promoted dtype (bf16 x fp32 is fp32)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perf_callbacks.analysis import analyze, format_text
from perf_callbacks.analysis.compute.op_cost import op_cost
from tests.analysis.conftest import write_trace, x

N = 1 << 20
BF16, FP32 = "c10::BFloat16", "float"


def _mul_trace(path: Path, dims: list[Any], types: list[str]) -> Path:
    """Two ``aten::mul`` calls on the device, each launching one 100 us kernel."""
    events = [x("user_annotation", "ProfilerStep#1", 0, 1_000)]
    for i, ts in enumerate((100.0, 500.0)):
        events += [x("cpu_op", "aten::mul", ts, 20, **{"External id": i + 1, "Input Dims": dims,
                                                        "Input type": types}),
                   x("cuda_runtime", "cudaLaunchKernel", ts + 5, 5, correlation=i + 1, **{"External id": i + 1}),
                   x("kernel", "elementwise_kernel", ts + 20, 100, device=0, stream=7, correlation=i + 1,
                     **{"External id": i + 1})]
    return write_trace(path, events)


def _mul_row(tmp_path: Path, dims: list[Any], types: list[str]) -> dict[str, Any]:
    result = analyze(_mul_trace(tmp_path / "rank0.pt.trace.json", dims, types), sidecars=False)
    (row,) = [r for r in result.measures.roofline if r["op"] == "aten::mul"]
    return row


def test_an_out_call_writes_its_out_tensor_without_reading_it(tmp_path: Path) -> None:
    """``torch.mul(a, 2.0, out=b)`` as ``tl_mi300_resnet_ckpt`` records it: ``[[n], [], [n]]``. One read of ``a``,
    one write of ``b`` (was counted read and written: +50%)."""
    row = _mul_row(tmp_path, [[N], [], [N]], [BF16, "Scalar", BF16])
    assert (row["count"], row["flops"], row["bytes"]) == (2, 2 * N, 2 * (2 * N + 2 * N))


def test_a_bf16_times_fp32_product_writes_fp32(tmp_path: Path) -> None:
    """``tl_xdit_flux_rocm``'s bf16 x fp32 ``aten::mul``: torch promotes the result to fp32 (was counted bf16: -33%)."""
    row = _mul_row(tmp_path, [[N], [N]], [BF16, FP32])
    assert row["bytes"] == 2 * (2 * N + 4 * N + 4 * N)


def test_promotion_follows_torch_and_in_place_calls_keep_their_dtype() -> None:
    """The result dtype is ``torch.promote_types`` over the tensors with dimensions: a 0-dim tensor or a scalar does
    not widen it, an integer tensor does not widen floats, bf16 with fp16 gives fp32; an in-place call writes its
    first tensor's dtype; ``where``'s bool condition is read, never the output's dtype."""
    assert op_cost("aten::mul", [[N], [N]], [FP32, BF16], [])[2] == 4 * N + 2 * N + 4 * N
    assert op_cost("aten::add", [[N], [N], []], ["c10::Half", BF16, "Scalar"], [])[2] == 2 * N + 2 * N + 4 * N
    assert op_cost("aten::mul", [[N], [N]], [BF16, "long int"], [])[2] == 2 * N + 8 * N + 2 * N
    assert op_cost("aten::mul", [[N], []], [BF16, FP32], [])[2] == 2 * N + 2 * N  # a 0-dim fp32 tensor
    assert op_cost("aten::mul_", [[N], [N]], [BF16, FP32], [])[2] == 2 * N + 4 * N + 2 * N
    assert op_cost("aten::where", [[N], [N], [N]], ["bool", BF16, BF16], [])[2] == N + 2 * N + 2 * N + 2 * N
    # an out= call writes the out tensor's dtype, whatever the inputs promote to
    assert op_cost("aten::add", [[N], [N], [], [N]], [BF16, BF16, "Scalar", FP32], [])[2] == 2 * N + 2 * N + 4 * N
    # add's third argument is alpha, not out: a functional add reads both tensors
    assert op_cost("aten::add", [[N], [N], []], [BF16, BF16, "Scalar"], [])[2] == 3 * 2 * N
    assert op_cost("aten::gelu", [[N], []], [BF16, "c10::string_view"], [])[2] == 2 * 2 * N


def test_ops_that_keep_their_input_dtype_are_not_promoted() -> None:
    """``native_layer_norm`` of a bf16 input with fp32 weight and bias writes bf16."""
    got = op_cost("aten::native_layer_norm", [[N, 64], [], [64], [64], []], [BF16, "", FP32, FP32, "double"], [])
    assert got is not None and got[2] == 2 * 64 * N + 4 * 64 + 4 * 64 + 2 * 64 * N


def test_cpu_timed_rows_are_never_held_to_the_device_peaks(tmp_path: Path) -> None:
    """HTA's ``distributed_info_unavailable``: the trace names an A100 but holds no device event, so each row's time
    is the op's own CPU time; an ``aten::addmm`` of 2 x 1024^3 FLOPs in 10 us of CPU time 'runs' at 214.7 TFLOP/s,
    which the A100's peaks made 1101% of the fp32 bound. CPU time is not held to a device's peaks: no bound."""
    props = [{"id": 0, "name": "NVIDIA A100-PG509-200", "totalGlobalMem": 42505273344, "computeMajor": 8}]
    events = [x("user_annotation", "ProfilerStep#1", 0, 1_000),
              x("cpu_op", "aten::addmm", 100, 10, **{"External id": 1, "Input Dims": [[1024], [1024, 1024],
                                                      [1024, 1024], [], []],
                                                      "Input type": [FP32, FP32, FP32, "Scalar", "Scalar"]})]
    result = analyze(write_trace(tmp_path / "rank0.pt.trace.json", events, deviceProperties=props), sidecars=False)
    (row,) = [r for r in result.measures.roofline if r["op"] == "aten::addmm"]
    assert row["device"] == "cpu"
    assert row["achieved_tflops"] == pytest.approx(2 * 1024**3 / 10e-6 / 1e12)  # measured, shown
    assert (row["bound_share"], row["bound"], row["bound_tflops"], row["peak_tflops"]) == (None, None, None, None)
    text = format_text(result)
    assert "A100" not in text.split("operators against the roofline")[1].split("\n\n")[0]
