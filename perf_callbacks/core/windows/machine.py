"""What the report's advice needs to know of the machine and the training loader, written into each window's trace.

``perf-callbacks report`` may run on another machine, or long after training: the trace itself says how many CPU
cores the training process could use, how many ranks shared its machine, the training loader's ``num_workers`` and
whether it trained on CUDA (read back by :mod:`perf_callbacks.analysis.trace.machine`), so that the advice never
suggests what is already set (more workers than cores) or does not apply (CUDA profiling on a machine without CUDA).

Example:
    >>> from pathlib import Path
    >>> from perf_callbacks.core.context import RunContext
    >>> meta = machine_meta(RunContext(Path("out"), "run", data_loader=("train_dataloader", 2)), cuda=False)
    >>> meta["num_workers"], meta["cuda"], meta["cpu_cores"] >= 1
    (2, False, True)
"""

from __future__ import annotations

import functools
from typing import Any

from perf_callbacks.analysis.judge.advice import available_cpus, ranks_on_machine
from perf_callbacks.core.context import RunContext

META_KEY = "perf_callbacks_machine"
"""The trace's top-level metadata key (``perf_callbacks.analysis.trace.machine.META_KEY``)."""


def machine_meta(ctx: RunContext, cuda: bool) -> dict[str, Any]:
    """The ``perf_callbacks_machine`` entry for a window of this run: plain JSON values."""
    name, workers = ctx.data_loader
    return {
        "cpu_cores": available_cpus(),
        "local_world_size": ctx.local_world_size or ranks_on_machine(),
        "loader": name,
        "num_workers": workers if isinstance(workers, int) and not isinstance(workers, bool) else None,
        "cuda": bool(cuda),
        "cpu_bf16": cpu_bf16(),
    }


BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""``/proc/cpuinfo`` flags of a CPU that computes in bf16 natively (no tensor cores: vector and matrix units)."""


@functools.lru_cache(maxsize=1)
def cpu_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU has bf16 instructions (``BF16_FLAGS``), so that bf16 autocast on the CPU can pay.

    False where ``/proc/cpuinfo`` does not say (not Linux).
    """
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return any(flag in flags for flag in BF16_FLAGS)
