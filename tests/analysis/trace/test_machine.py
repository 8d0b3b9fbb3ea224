"""Whether the machine had CUDA: our metadata's ``cuda`` flag, when the trace has it, wins over what the trace lists."""

from __future__ import annotations

from perf_callbacks.analysis.trace.machine import META_KEY, cuda_on_host, machine_of

GPU = [{"id": 0, "name": "NVIDIA H200"}]


def meta(cuda: object, props: bool) -> dict[str, object]:
    entry = {"cpu_cores": 16, "local_world_size": 2, "num_workers": 2, "loader": "train", "cuda": cuda}
    return {META_KEY: entry, **({"deviceProperties": GPU} if props else {})}


def test_the_machine_flag_wins_over_the_traces_devices_and_runtime_calls() -> None:
    for cuda, props, calls, want in [(False, True, 10, False), (True, False, 0, True), ("yes", True, 10, False)]:
        m = meta(cuda, props)
        assert cuda_on_host(m, machine_of(m), calls) is want, (cuda, props, calls)


def test_without_our_metadata_the_trace_says() -> None:
    assert cuda_on_host({"deviceProperties": GPU}, {}, 0) is True
    assert cuda_on_host({}, {}, 3) is True
    assert cuda_on_host({}, {}, 0) is False
