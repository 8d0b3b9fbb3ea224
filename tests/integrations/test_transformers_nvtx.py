"""A short ``transformers.Trainer`` run under a real NVTX tool (the injection library): names, balance, step numbers."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.nvtx_injection.harness import assert_balanced, build_injection_lib, pushes, run_with_injection

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def injection_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_injection_lib(tmp_path_factory)


TRAINER_RUN = textwrap.dedent("""
    import pathlib
    from perf_callbacks import TransformersPerfCallback
    from tests.integrations.hf_helpers import QUIET, make_trainer
    tmp = pathlib.Path.cwd()
    cb = TransformersPerfCallback(output_dir=str(tmp / "perf"), nvtx_modules=True, **QUIET,
                                  schedule={"skip_first": 2, "wait": 0, "warmup": 0, "active": 1})
    make_trainer(tmp, [cb], max_steps=4, ga=2, eval_steps=4, save_strategy="steps", save_steps=2).train()
""")


def test_trainer_run_emits_balanced_step_and_phase_ranges(injection_lib: Path, tmp_path: Path) -> None:
    events = run_with_injection(TRAINER_RUN, tmp_path, injection_lib, timeout=180)
    ours = [e for e in events if e.domain == "perf_callbacks"]
    paths = assert_balanced(ours)
    steps = [e.payload for e in pushes(ours) if e.message == "step"]
    assert steps == [0, 1, 2, 3]  # 4 steps ran; no range is opened for a step that never runs
    in_step = [p[1] for p in paths if len(p) == 2 and p[0] == "step"]
    assert in_step.count("forward") == 8 and in_step.count("backward") == 8  # 4 steps x 2 micro-batches
    assert in_step.count("optimizer_step") == 4
    assert in_step.count("data_wait") >= 6  # 2 per step (the fetch before step 0 is the engine's choice)
    assert in_step.count("validation") == 1  # evaluation at global step 4
    saves = [p for p in paths if p[-1] == "checkpoint"]
    assert len(saves) == 2 and all(p[0] == "step" for p in saves)  # saves at global steps 2 and 4
    # per-module ranges only inside the window (step 2): the model's forward and its layer, 2 micro-batches
    assert [p[2:] for p in paths if len(p) >= 3 and p[1] == "forward"] == [("Tiny",), ("Tiny", "layer")] * 2
