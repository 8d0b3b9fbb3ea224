"""torch.compile health in the engine, with real ``torch.compile`` on CPU and fed step times.

The backend is ``eager`` (or a backend that is ``eager`` after adding fed seconds to the fake clock, so that a
compilation takes a known time); the engine runs on a fake ``perf_counter``, as in ``test_engine.py``.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
import torch._dynamo

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.engine.engine import PerfEngine, RunContext
from perf_callbacks.core.flops.compile_watch import CompileWatch
from perf_callbacks.exceptions import CompileWarning, InstrumentUnavailableWarning, PerformanceDegradationWarning


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def make_engine(tmp_path: Path, logged: list, **options: object) -> PerfEngine:
    cfg = PerfConfig.from_dict({"schedule": {"skip_first": 100000}, "summary": False, "data_wait_steps": 100000,
                                **options})
    ctx = RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=5,
                     log_metrics=lambda m, s: logged.append((s, m)))
    return PerfEngine(cfg, ctx)


def timed_backend(clock: FakeClock, seconds: float) -> Callable[..., Any]:
    """A torch.compile backend that runs the graph eagerly and takes ``seconds`` of fake time to "compile" it."""
    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        clock.t += seconds
        return gm.forward
    return backend


class Branchy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.layer(x)
        if y.sum() > 0:  # data-dependent: a graph break
            y = y * 2
        return y.relu()


def train(engine: PerfEngine, clock: FakeClock, model: Callable[[torch.Tensor], torch.Tensor], steps: int,
          work: Callable[[int], float] = lambda step: 0.1, batch: Callable[[int], int] = lambda step: 8,
          start: int = 0) -> None:
    """``steps`` optimizer steps of the compiled ``model`` on a batch of ``batch(step)`` rows; ``work(step)`` fed s."""
    for step in range(start, start + steps):
        engine.data_start()
        engine.data_end()
        engine.batch_start(step)
        model(torch.randn(batch(step), 4)).sum().backward()
        clock.t += work(step)
        engine.batch_end(stepped=True, samples=10)


def run(tmp_path: Path, model: Callable[[torch.Tensor], torch.Tensor], clock: FakeClock, steps: int,
        **kwargs: Any) -> tuple[list, list[warnings.WarningMessage]]:
    logged: list = []
    with mock.patch("time.perf_counter", clock), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        engine = make_engine(tmp_path, logged, degradation_threshold=0.2)
        if isinstance(model, torch.nn.Module):
            engine.attach_model(model)  # a compiled model: its FLOPs are not counted (that would stop its compiling)
        train(engine, clock, model, steps, **kwargs)
        engine.close()
    return logged, [w for w in seen if issubclass(w.category, (CompileWarning, PerformanceDegradationWarning,
                                                              InstrumentUnavailableWarning))]


def test_a_model_compiled_once_has_its_compile_time_at_the_start_set_aside(tmp_path: Path) -> None:
    """Step 0 compiles for 2 s (fed): logged as compile time, not step time; no storm, no slowdown, no break."""
    clock = FakeClock()
    model = torch.compile(torch.nn.Linear(4, 4), backend=timed_backend(clock, 2.0))
    logged, said = run(tmp_path, model, clock, 100)
    assert said == []
    first = logged[0][1]
    assert first["perf/compile/seconds"] == pytest.approx(2.0)
    assert first["perf/train/samples_per_sec"] == pytest.approx(100.0)  # 10 samples in 0.1 s a step: 2 s set aside
    assert (first["perf/compile/recompiles"], first["perf/compile/graph_breaks"]) == (0.0, 0.0)
    later = [m["perf/compile/seconds"] for _, m in logged[1:]]
    assert len(later) == 19 and set(later) == {0.0}


def test_a_model_never_compiled_logs_no_compile_figures(tmp_path: Path) -> None:
    clock = FakeClock()
    logged, said = run(tmp_path, torch.nn.Linear(4, 4), clock, 10)
    assert said == [] and len(logged) == 2
    assert not any(k.startswith("perf/compile/") for _, m in logged for k in m)


def test_a_function_compiled_inside_the_step_still_compiles_and_its_flops_are_not_counted(tmp_path: Path) -> None:
    """Step 0 runs under FlopCounterMode (FLOPs are counted on it), and nothing tells that the model is compiled: torch
    compiles it all the same (it never compiles a function it first sees under a dispatch mode, unless told), and the
    count, which would miss the compiled kernels, is dropped."""
    clock = FakeClock()
    inner = torch.compile(torch.nn.Linear(4, 4), backend=timed_backend(clock, 2.0))
    logged, said = run(tmp_path, lambda x: inner(x), clock, 10)
    assert said == []
    assert [m["perf/compile/seconds"] for _, m in logged] == pytest.approx([2.0, 0.0])
    assert not any("perf/train/tflops" in m for _, m in logged)


@pytest.mark.parametrize("slower", [1.0, 1.5])
def test_the_slowdown_check_skips_compiling_intervals_and_still_catches_a_slowdown_after_them(
        tmp_path: Path, slower: float) -> None:
    """Steps 0-14 compile a new batch size each (3 s fed each); 100 ms steps, then from step 60 ``slower`` times that.

    Compilation is neither step time nor in the baseline: a 1.5x slowdown is said once, an unchanged pace never.
    """
    clock = FakeClock()
    model = torch.compile(torch.nn.Linear(4, 4), backend=timed_backend(clock, 3.0), dynamic=False)
    with mock.patch.object(torch._dynamo.config, "recompile_limit", 64):
        logged, said = run(tmp_path, model, clock, 120, batch=lambda s: 8 + min(s, 14),
                           work=lambda s: 0.1 * (slower if s >= 60 else 1.0))
    slow = [str(w.message) for w in said if w.category is PerformanceDegradationWarning]
    assert len(slow) == (1 if slower > 1 else 0), slow
    if slow:
        assert "50% above this run's baseline" in slow[0] and "150.00 ms against a baseline of 100.00 ms" in slow[0]
    assert sum(m["perf/compile/seconds"] for _, m in logged) == pytest.approx(15 * 3.0)
    assert [m["perf/train/step_time_ms"] for _, m in logged[:3]] == pytest.approx([100.0] * 3)


def test_an_interval_that_compiled_never_feeds_the_slowdown_check(tmp_path: Path) -> None:
    clock = FakeClock()
    model = torch.compile(torch.nn.Linear(4, 4), backend="eager", dynamic=False)
    logged: list = []
    with mock.patch("time.perf_counter", clock):
        engine = make_engine(tmp_path, logged)
        engine.attach_model(model)
        check = mock.MagicMock(wraps=engine.monitor.degradation.check)
        engine.monitor.degradation.check = check  # type: ignore[method-assign]
        train(engine, clock, model, 41, batch=lambda s: 8 if s < 24 else 9)  # compiles at steps 0 and 24
        engine.close()
    # logged at steps 5, 10, ... 40, holding the steps measured by then: 0-3, 4-8, ..., 34-38. Step 24 logs the
    # interval 19-23 after it compiled, and is measured in 24-28: both are left out, as is 0-3, and only they
    assert [s for s, _ in logged] == list(range(5, 45, 5))
    assert [c.args[1] for c in check.call_args_list] == [8, 13, 18, 33, 38]


def test_a_batch_size_changing_every_5_steps_is_one_storm_warning_naming_the_size(tmp_path: Path) -> None:
    clock = FakeClock()
    model = torch.compile(torch.nn.Linear(4, 4), backend="eager", dynamic=False)
    logged, said = run(tmp_path, model, clock, 60, batch=lambda s: 8 + s // 5)
    storms = [str(w.message) for w in said if w.category is CompileWarning]
    assert len(storms) == 1, storms
    assert "recompiled at 5 of the last 50 steps (steps 5, 10, 15, 20, 25;" in storms[0]
    assert "the compiled module was recompiled because tensor 'args[0]' size mismatch at index 0. expected 12, " \
           "actual 13" in storms[0]
    assert "dynamic=True" in storms[0] and "mark_dynamic" in storms[0] and "buckets" in storms[0]
    assert [m["perf/compile/recompiles"] for _, m in logged] == [0.0] + [1.0] * 7 + [0.0] * 4  # then the limit
    assert [w for w in said if w.category is not CompileWarning] == []


def test_torch_reaching_its_recompile_limit_is_a_storm_said_once(tmp_path: Path) -> None:
    """Three sizes 20 steps apart (no 5 recompiling steps in 50) against a recompile limit of 2: torch gives up on the
    third, runs the model eagerly for it, and that is said, once."""
    clock = FakeClock()
    model = torch.compile(torch.nn.Linear(4, 4), backend="eager", dynamic=False)
    with mock.patch.object(torch._dynamo.config, "recompile_limit", 2):
        logged, said = run(tmp_path, model, clock, 60, batch=lambda s: 8 + s // 20)
    assert len(said) == 1 and said[0].category is CompileWarning
    message = str(said[0].message)
    assert message.startswith("perf-callbacks: torch.compile recompiled at 1 of the last 50 steps (steps 20; ")
    assert "; torch reached its recompile limit for the compiled module and now runs it eagerly" in message
    assert "size mismatch at index 0. expected 8, actual 9" in message
    assert sum(m["perf/compile/recompiles"] for _, m in logged) == 1


@pytest.mark.parametrize("sizes", [[8, 16, 24, 32, 8, 16, 24, 32], [8, 9, 10, 11, 12]])
def test_a_model_compiled_once_per_bucket_is_no_storm(tmp_path: Path, sizes: list[int]) -> None:
    """Four buckets cycling, or five buckets first seen in a row: at most 4 recompilations, never a storm."""
    clock = FakeClock()
    model = torch.compile(torch.nn.Linear(4, 4), backend="eager", dynamic=False)
    logged, said = run(tmp_path, model, clock, 60, batch=lambda s: sizes[s % len(sizes)] if s < 40 else 8)
    assert said == []
    assert sum(m["perf/compile/recompiles"] for _, m in logged) == len(set(sizes)) - 1


def test_a_data_dependent_if_is_a_graph_break_said_once_with_its_line(tmp_path: Path) -> None:
    clock = FakeClock()
    model = torch.compile(Branchy(), backend="eager")
    logged, said = run(tmp_path, model, clock, 20)
    assert len(said) == 1 and said[0].category is CompileWarning
    message = str(said[0].message)
    assert "1 graph break in the compilation at step 0, at 1 place in the code: data-dependent control flow" in message
    assert "test_compile_watch.py:" in message and "`if y.sum() > 0:" in message and "(1x)" in message
    assert [m["perf/compile/graph_breaks"] for _, m in logged] == [1.0, 0.0, 0.0, 0.0]


def test_compilation_inside_validation_is_set_aside_once_and_is_no_storm(tmp_path: Path) -> None:
    clock = FakeClock()
    model = torch.compile(torch.nn.Linear(4, 4), backend=timed_backend(clock, 1.0), dynamic=False)
    logged: list = []
    with mock.patch("time.perf_counter", clock), warnings.catch_warnings():
        warnings.simplefilter("error")
        engine = make_engine(tmp_path, logged)
        engine.attach_model(model)
        for step in range(40):
            train(engine, clock, model, 1, start=step)
            engine.validation_start()
            with torch.no_grad():
                for rows in (100, 37):  # full batches and the last one: recompiled once each, in validation
                    model(torch.randn(rows, 4))
            clock.t += 0.5
            engine.validation_end()
        engine.close()
    assert logged[0][1]["perf/train/samples_per_sec"] == pytest.approx(100.0)
    assert [m["perf/compile/seconds"] for _, m in logged] == pytest.approx([3.0] + [0.0] * 7)


def test_hooks_come_back_after_dynamo_reset(tmp_path: Path) -> None:
    clock = FakeClock()
    logged: list = []
    with mock.patch("time.perf_counter", clock):
        engine = make_engine(tmp_path, logged, flops=False)
        train(engine, clock, torch.compile(torch.nn.Linear(4, 4), backend=timed_backend(clock, 1.0)), 6)
        torch._dynamo.reset()  # clears every compile callback: ours are back at the next logging step (10)
        train(engine, clock, torch.nn.Linear(4, 4), 4, start=6)
        train(engine, clock, torch.compile(torch.nn.Linear(4, 4), backend=timed_backend(clock, 2.0)), 5, start=10)
        engine.close()
    assert [m["perf/compile/seconds"] for _, m in logged] == pytest.approx([1.0, 0.0, 2.0])
    assert engine.compile._end not in torch._dynamo.callback.callback_handler.end_callbacks


def test_a_failing_compile_record_turns_the_figures_off_once_and_training_goes_on(tmp_path: Path) -> None:
    clock = FakeClock()
    model = torch.compile(Branchy(), backend="eager")
    with mock.patch("torch._dynamo.utils.get_compilation_metrics", side_effect=RuntimeError("no records")):
        logged, said = run(tmp_path, model, clock, 12)
    assert [w.category for w in said] == [InstrumentUnavailableWarning]
    assert "torch.compile figures are off for this run" in str(said[0].message) and "no records" in str(said[0].message)
    assert len(logged) == 2 and not any(k.startswith("perf/compile/") for _, m in logged for k in m)
    assert not torch._dynamo.callback.callback_handler.start_callbacks


def test_an_engine_left_unclosed_is_not_kept_alive_by_torchs_callbacks(tmp_path: Path) -> None:
    import gc
    import weakref

    engine = make_engine(tmp_path, [])
    ref = weakref.ref(engine)
    del engine
    gc.collect()
    assert ref() is None


def test_an_engine_never_imports_dynamo(tmp_path: Path) -> None:
    """Importing torch._dynamo costs about a second: a run that never compiles never pays it."""
    code = ("import sys, pathlib; from perf_callbacks.core.engine.engine import PerfEngine, RunContext; "
            "from perf_callbacks.config import PerfConfig; "
            f"e = PerfEngine(PerfConfig(), RunContext(output_dir=pathlib.Path({str(tmp_path)!r}), run_name='r')); "
            "e.batch_start(0); e.batch_end(True); e.close(); print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False"


def test_a_window_holding_compilation_says_so_in_its_summary(tmp_path: Path) -> None:
    """Windows at steps 4-5 and 8-9; step 5 compiles a new batch size for 1.5 s (fed), step 0 before any window."""
    from perf_callbacks.core.windows.background import WindowJob
    from perf_callbacks.core.windows.summary import window_header

    clock = FakeClock()
    model = torch.compile(torch.nn.Linear(4, 4), backend=timed_backend(clock, 1.5), dynamic=False)
    metas: list[dict[str, Any]] = []
    start = WindowJob.start

    def started(job: WindowJob) -> None:
        metas.append(job.meta)
        start(job)

    with mock.patch("time.perf_counter", clock), mock.patch.object(WindowJob, "start", started):
        engine = PerfEngine(PerfConfig.from_dict({
            "schedule": {"skip_first": 2, "wait": 1, "warmup": 1, "active": 2, "repeat": 2}, "summary": False}),
            RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=5))
        engine.attach_model(model)
        train(engine, clock, model, 10, batch=lambda s: 8 if s < 5 else 9)
        engine.close()
    assert [m["window"] for m in metas] == [[4, 5], [8, 9]]
    assert [m.get("compile_s") for m in metas] == [1.5, None]
    assert "  torch.compile compiled for 1.50 s in this window's steps (set aside from the figures below, as " \
           "validation is)" in window_header(metas[0], 0, 2)
    assert not any("torch.compile" in line for line in window_header(metas[1], 0, 2))


def test_report_sets_compilation_aside_and_says_how_long(tmp_path: Path) -> None:
    """A real window (steps 2-3) whose step 3 compiles for at least 1 s (a backend that sleeps): the report of its
    trace sets that time aside, as validation, and says how long it was."""
    import time

    from perf_callbacks.analysis.windows.api import analyze

    def sleepy(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        time.sleep(1.0)
        return gm.forward

    model = torch.compile(torch.nn.Linear(4, 4), backend=sleepy, dynamic=False)
    engine = PerfEngine(PerfConfig.from_dict({"schedule": {"skip_first": 0, "wait": 1, "warmup": 1, "active": 2},
                                              "summary": False, "flops": False}),
                        RunContext(output_dir=tmp_path, run_name="run", log_every_n_steps=50))
    train(engine, FakeClock(), model, 5, batch=lambda s: 8 if s < 3 else 9)
    engine.close()
    (trace,) = engine.exported
    result = analyze(trace.parent)
    (note,) = [n for n in result.notes if "torch.compile compilation" in n]
    compiled_ms = float(note.split("torch.compile compilation ")[1].split(" ms")[0])
    assert compiled_ms >= 1000.0
    assert result.step_time_ms is not None and result.step_time_ms < compiled_ms / 4  # half of it, were it step time


def test_graph_break_and_storm_words() -> None:
    from collections import Counter
    from types import SimpleNamespace

    from perf_callbacks.core.flops.compile_text import graph_break_message, storm_message

    assert graph_break_message(Counter({"a": 2, "b": 1}), None).startswith(
        "torch.compile: 3 graph breaks in the compilation during validation, at 2 places in the code: a (2x); b (1x).")
    record = SimpleNamespace(co_name="step", co_filename="/src/train.py", co_firstlineno=7, recompile_reason=None)
    assert storm_message([(5, 0.25), (6, 0.5)], 50, record, None).startswith(
        "torch.compile recompiled at 2 of the last 50 steps (steps 5, 6; 0.8 s of compilation); `step` (train.py:7) was "
        "recompiled (torch recorded no reason: run with TORCH_LOGS=recompiles to see it). ")


class FedRecords:
    """torch's compile records and graph-break reasons, fed by the test to a CompileWatch (torch._dynamo loaded)."""

    def __init__(self) -> None:
        self.records: list[Any] = []
        self.breaks: list[Any] = []
        self.said: list[str] = []
        self.patches: list[Any] = [mock.patch("torch._dynamo.utils.get_compilation_metrics", side_effect=lambda: list(self.records)),
                        mock.patch("torch._dynamo.utils.graph_break_reasons", self.breaks)]

    def watch(self) -> CompileWatch:
        return CompileWatch(lambda key, category, message: self.said.append(key), lambda seconds: None)

    def compile_at(self, watch: CompileWatch, step: int, *cache_sizes: int) -> list[str]:
        """Compilations in ``step`` (a cache size of 1 or more: a recompilation); what the watch said at its poll."""
        from types import SimpleNamespace

        self.records += [SimpleNamespace(cache_size=n, fail_reason=None, co_name="f", co_filename="t.py",
                                         co_firstlineno=1, recompile_reason="size") for n in cache_sizes]
        for _ in cache_sizes:  # torch's callbacks around each compilation
            watch._start()
            watch._end()
        before = len(self.said)
        watch.poll(step)
        return self.said[before:]


def test_a_recompilation_fifty_steps_back_is_out_of_the_storm_window() -> None:
    """Recompiles at steps 10, 20, 30, 40 and 60: step 10 is 50 steps back from 60, out of the window (4 in it)."""
    fed = FedRecords()
    with fed.patches[0], fed.patches[1]:
        watch = fed.watch()
        assert fed.compile_at(watch, 0, 0) == []
        for step in (10, 20, 30, 40):
            assert fed.compile_at(watch, step, 1) == []
        assert fed.compile_at(watch, 60, 1) == []
        assert fed.compile_at(watch, 61, 1) == ["recompile_storm"]  # the control: 20, 30, 40, 60, 61
        watch.close()


def test_the_first_compiling_step_is_not_counted_in_a_storm() -> None:
    """The first step compiles, then recompiles (a dynamic shape found at once): four later recompiles are no storm."""
    fed = FedRecords()
    with fed.patches[0], fed.patches[1]:
        watch = fed.watch()
        assert fed.compile_at(watch, 3, 0, 1) == []
        for step in (10, 20, 30, 40):
            assert fed.compile_at(watch, step, 1) == []
        assert fed.compile_at(watch, 45, 1) == ["recompile_storm"]  # the control: a fifth later step
        watch.close()


def test_a_graph_break_is_said_and_counted_once() -> None:
    from types import SimpleNamespace

    fed = FedRecords()
    with fed.patches[0], fed.patches[1]:
        watch = fed.watch()
        fed.breaks.append(SimpleNamespace(reason="generic_jump", user_stack=[]))
        assert fed.compile_at(watch, 1, 0) == ["graph_breaks"]
        assert fed.compile_at(watch, 2) == []
        metrics: dict[str, float] = {}
        watch.add_metrics(metrics, 3)
        assert metrics["compile/graph_breaks"] == 1.0
        watch.close()


def test_a_logging_step_of_a_run_that_compiles_nothing_copies_no_compile_records(tmp_path: Path) -> None:
    """The logging step reads torch's compile records only when something may be new: a run that compiled nothing
    (torch._dynamo loaded, as Lightning loads it) never calls ``get_compilation_metrics`` (a list copy each time)."""
    clock, logged = FakeClock(), []
    engine = make_engine(tmp_path, logged)
    with mock.patch("time.perf_counter", clock), mock.patch.object(
            torch._dynamo.utils, "get_compilation_metrics", wraps=torch._dynamo.utils.get_compilation_metrics) as read:
        for step in range(20):
            engine.batch_start(step)
            clock.t += 0.01
            engine.batch_end(True, 8)
        engine.close()
    assert len(logged) == 4 and read.call_count == 0
