"""Out-of-memory forensics in the core: the summary's facts and advice, the engine's hand-off, the config keys, and
on CUDA a real out-of-memory with allocator history."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.core.memory.oom import OOMForensics, batch_from_traceback, describe_batch
from perf_callbacks.core.memory.oom_report import OOMFacts, advice, format_summary
from perf_callbacks.core.memory.sampler import OutOfMemoryError
from perf_callbacks.exceptions import InstrumentUnavailableWarning, PerfConfigError
from tests.core.engine_helpers import make_engine, run_steps

GB = 10**9
MESSAGE = "CUDA out of memory. Tried to allocate 2.00 GiB"


def cuda_facts(**changes: object) -> OOMFacts:
    facts = OOMFacts(rank=1, step=40, phase="backward", error=f"OutOfMemoryError: {MESSAGE}", batch="size 16; x",
                     allocated=70 * GB, reserved=72 * GB, peak=71 * GB, total=80 * GB,
                     largest_allocations=[4 * GB, 2 * GB], largest_free_block=GB // 2)
    for k, v in changes.items():
        setattr(facts, k, v)
    return facts


def test_summary_states_the_device_numbers_and_fragmentation() -> None:
    text = format_summary(cuda_facts(files=["memory_summary.txt", "snapshot.pickle"]))
    assert text.startswith("out of memory on rank 1 at step 40, phase backward\n")
    assert "device: allocated 70.00 GB, reserved 72.00 GB, peak 71.00 GB, total 80.00 GB" in text
    assert "requested: 2.00 GiB" in text
    assert "largest live allocations: 4.00 GB, 2.00 GB" in text
    assert "fragmentation: reserved - allocated = 2.00 GB (3% of reserved), largest free block 0.50 GB" in text
    assert "files: memory_summary.txt, snapshot.pickle" in text and "https://pytorch.org/memory_viz" in text


def test_advice_follows_the_numbers() -> None:
    backward = advice(cuda_facts())
    assert any("it failed in backward" in a and "activation checkpointing" in a for a in backward)
    assert any("smaller batch (now 16)" in a for a in backward)
    assert not any("expandable_segments" in a or "shard optimizer" in a for a in backward)
    fragmented = advice(cuda_facts(allocated=50 * GB))  # 22 of 72 GB reserved but unused
    assert any("31% of reserved memory is cached but unused" in a and "expandable_segments:True" in a
               for a in fragmented)
    optimizer = advice(cuda_facts(phase="forward", phase_peaks={"forward": 30e3, "optimizer_step": 70e3}))
    assert any("optimizer_step had the largest per-phase peak (73.40 GB)" in a and "shard optimizer state" in a
               for a in optimizer)
    assert any("checkpoint" in a for a in advice(cuda_facts(phase="checkpoint")))
    assert any("torch.no_grad()" in a for a in advice(cuda_facts(phase="validation")))


def test_summary_splits_the_device_memory_by_category_and_advises_on_the_largest() -> None:
    parts = {"parameters": 10 * GB, "gradients": 10 * GB, "optimizer_state": 40 * GB}
    facts = cuda_facts(categories=parts)  # 70 GB allocated: 10 GB is neither of the three
    assert ("device memory by category: parameters 10.0 GB, gradients 10.0 GB, optimizer state 40.0 GB, activations "
            "and temporaries 10.0 GB (allocated less the three)") in format_summary(facts)
    first = advice(facts)[0]
    assert first.startswith("optimizer state is the largest part (40.0 GB): shard it across ranks")
    activations = advice(cuda_facts(categories={**parts, "optimizer_state": 5 * GB}))[0]  # 45 GB of the rest
    assert activations.startswith("activations is the largest part (45.0 GB): use activation checkpointing")
    host = format_summary(cuda_facts(categories=parts, allocated=None))
    assert "host memory by category: parameters 10.0 GB, gradients 10.0 GB, optimizer state 40.0 GB\n" in host
    assert "memory by category" not in format_summary(cuda_facts())  # not measured: no line


def test_oom_measures_the_parts_of_the_live_tensors(tmp_path: Path) -> None:
    model = torch.nn.Linear(8, 4)  # 36 parameters, tied below to a second module: counted once
    twin = torch.nn.Linear(8, 4)
    twin.weight = model.weight
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 8)).sum().backward()
    opt.step()
    oom = OOMForensics(memory_history=0, rank=0, run_dir=tmp_path, device=None)
    oom.owners = lambda: ([model, twin], [opt])
    oom.on_oom(OutOfMemoryError("out of memory"), step=1, phase="forward", echo=False)
    text = (tmp_path / "oom-rank0" / "summary.txt").read_text()
    # twin's own bias (16 B) is new; Adam: two moments per parameter (144 B each) and a 4-byte step per parameter
    assert "host memory by category: parameters 160 B, gradients 144 B, optimizer state 296 B\n" in text


def test_describe_batch_and_find_it_in_a_traceback() -> None:
    batch = {"input_ids": torch.zeros(4, 128, dtype=torch.long), "extra": [torch.ones(4, 3, 2), "text"]}
    assert describe_batch(batch) == "size 4; shapes: int64[4, 128], float32[4, 3, 2]"
    assert describe_batch(["no tensors"]) is None

    def training_step(batch: object) -> None:
        raise OutOfMemoryError(MESSAGE)

    with pytest.raises(OutOfMemoryError) as info:
        training_step(batch)
    assert batch_from_traceback(info.value) is batch


def test_writing_never_raises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    oom = OOMForensics(0, rank=0, run_dir=blocked, device=None)
    with pytest.warns(InstrumentUnavailableWarning, match=r"^perf-callbacks: out-of-memory evidence not written: Not "
                      r"a directory \(ENOTDIR\): .*/file/oom-rank0; its summary is printed to stderr$"):
        assert oom.on_oom(OutOfMemoryError(MESSAGE), 3, "forward") is None
    assert "perf-callbacks: out of memory on rank 0 at step 3, phase forward" in capsys.readouterr().err


def test_a_snapshot_that_does_not_fit_leaves_nothing_behind_and_turns_snapshots_off(
        small_fs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda device=None: {"segments": [bytes(200_000)]})
    oom = OOMForensics(0, rank=0, run_dir=small_fs, device=None)
    oom.recording = True  # as with memory_history on CUDA
    window = small_fs / "window-000003-000004"
    with pytest.warns(InstrumentUnavailableWarning, match=r"^perf-callbacks: allocator snapshots disabled: No space "
                      r"left on device \(ENOSPC\): .*/window-000003-000004/rank0\.snapshot\.pickle; traces are "
                      r"still written; training continues$") as seen:
        oom.window_snapshot(window)
        oom.window_snapshot(window)  # off: not tried again
    assert len(seen) == 1
    assert list(window.iterdir()) == []  # no snapshot, no .partial


def test_engine_names_the_phase_noted_before_close(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, schedule={"skip_first": 100}, degradation_threshold=1e6)
    run_steps(engine, 3)
    err = OutOfMemoryError(MESSAGE)
    engine.checkpoint_start()
    engine.note_failure(err, "checkpoint")  # what the adapters' save wrappers do
    engine.checkpoint_end()
    engine.close(err)
    text = (tmp_path / "run" / "oom-rank0" / "summary.txt").read_text()
    assert text.startswith("out of memory on rank 0 at step 2, phase checkpoint\n")  # the save after step 2


def test_engine_writes_nothing_for_other_errors(tmp_path: Path) -> None:
    engine = make_engine(tmp_path, schedule={"skip_first": 100}, degradation_threshold=1e6)
    run_steps(engine, 2)
    engine.close(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not list(tmp_path.rglob("oom-rank*"))


@pytest.mark.parametrize(("options", "match"), [
    ({"memory_history": -1}, r"memory_history must be >= 0, got -1"),
    ({"memory_history": True}, r"memory_history must be an integer, got True \(bool\)"),
    ({"memory_history": "100000"}, r"memory_history must be an integer, got '100000' \(str\)"),
    ({"memory_history_start": -5}, r"memory_history_start must be >= 0, got -5"),
    ({"memory_histroy": 10}, r"unknown key 'memory_histroy' \(did you mean 'memory_history'\?\)"),
])
def test_memory_history_keys_are_validated(options: dict[str, object], match: str) -> None:
    with pytest.raises(PerfConfigError, match=match):
        PerfConfig.from_dict(options)


def test_memory_history_keys_from_yaml_and_python(tmp_path: Path) -> None:
    from perf_callbacks import AcceleratePerfHook, GPUPerfCallback

    plain = tmp_path / "perf.yaml"
    plain.write_text("memory_history: 100000\nmemory_history_start: 20\n")
    cli = tmp_path / "cli.yaml"
    cli.write_text("class_path: perf_callbacks.GPUPerfCallback\ninit_args:\n  memory_history: 100000\n"
                   "  memory_history_start: 20\n")
    expected = PerfConfig(memory_history=100000, memory_history_start=20)
    assert PerfConfig.from_yaml(plain) == PerfConfig.from_yaml(cli) == expected
    assert GPUPerfCallback(memory_history=100000, memory_history_start=20).config == expected
    assert AcceleratePerfHook(memory_history=100000, memory_history_start=20).config == expected
    with pytest.raises(PerfConfigError, match="memory_history_start must be >= 0"):
        GPUPerfCallback(memory_history_start=-1)


def test_memory_history_without_cuda_warns_once(tmp_path: Path) -> None:
    with pytest.warns(InstrumentUnavailableWarning, match="memory_history=1000 records the CUDA caching allocator"):
        engine = make_engine(tmp_path, memory_history=1000)
    assert not engine.mem.oom.recording and not engine.mem.oom.wants_step_hook


# ---- CUDA ----------------------------------------------------------------------------------------------------------
def cuda_engine(tmp_path: Path, **options: object) -> PerfEngine:
    cfg = PerfConfig.from_dict({"schedule": {"skip_first": 1, "wait": 0, "warmup": 1, "active": 2}, "summary": False,
                                "nvml": False, **options})
    device = torch.device("cuda", torch.cuda.current_device())
    return PerfEngine(cfg, RunContext(output_dir=tmp_path, run_name="run", device=device))


def cuda_steps(engine: PerfEngine, steps: int, fail_at: int | None = None) -> None:
    w = torch.randn(1024, 1024, device="cuda", requires_grad=True)
    for step in range(steps):
        engine.batch_start(step)
        loss = (w @ w).sum()
        if step == fail_at:
            total = torch.cuda.get_device_properties(w.device).total_memory
            torch.empty(2 * total, dtype=torch.uint8, device="cuda")  # beyond the device
        engine.phase("backward")
        loss.backward()
        engine.batch_end(stepped=True)


@pytest.mark.gpu
def test_real_cuda_oom_leaves_summary_memory_summary_and_snapshot(tmp_path: Path) -> None:
    from torch.cuda import _memory_viz

    engine = cuda_engine(tmp_path, memory_history=10000)
    try:
        with pytest.raises(OutOfMemoryError) as info:
            cuda_steps(engine, 8, fail_at=5)
        engine.close(info.value)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    folder = tmp_path / "run" / "oom-rank0"
    assert sorted(p.name for p in folder.iterdir()) == ["memory_summary.txt", "snapshot.pickle", "summary.txt"]
    text = (folder / "summary.txt").read_text()
    assert text.startswith("out of memory on rank 0 at step 5, phase forward\n")
    assert "captured at the failing allocation" in text and "largest live allocations: " in text
    assert "PyTorch CUDA memory summary" in (folder / "memory_summary.txt").read_text()
    snapshot = pickle.loads((folder / "snapshot.pickle").read_bytes())
    assert snapshot["segments"] and any(e["action"] == "oom" for e in snapshot["device_traces"][0])
    assert _memory_viz.segsum(snapshot).startswith("Summary of segments") and "<html" in _memory_viz.trace_plot(snapshot)
    window = tmp_path / "run" / "window-000002-000003" / "rank0.snapshot.pickle"  # history started at the window
    assert pickle.loads(window.read_bytes())["device_traces"]


@pytest.mark.gpu
def test_memory_history_start_at_a_step(tmp_path: Path) -> None:
    engine = cuda_engine(tmp_path, memory_history=1000, memory_history_start=4, schedule={"skip_first": 100})
    try:
        cuda_steps(engine, 3)  # steps 0-2 closed, step 3 open
        assert not engine.mem.oom.recording and engine.mem.history_at == 4
        engine.batch_start(3)
        engine.batch_end(stepped=True)
        engine.batch_start(4)  # step 4 begins
        assert engine.mem.oom.recording and engine.mem.history_at is None
    finally:
        engine.close()
    assert not engine.mem.oom.recording
