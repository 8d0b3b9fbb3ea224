"""The checks behind :class:`~perf_callbacks.config.PerfConfig`: keys, types and values of its options, and ``ranks``.

Each check raises one :class:`~perf_callbacks.exceptions.PerfConfigError` that names the option, says what it must be
and, where a slip is likely (a misspelt key, a percentage for a share, FLOP/s for TFLOP/s), what was probably meant.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from perf_callbacks.exceptions import PerfConfigError

if TYPE_CHECKING:
    import signal

ACTIVITIES = ("cpu", "cuda")


def field_names(cls: type) -> list[str]:
    """The option names of a config dataclass, in order."""
    return [f.name for f in dataclasses.fields(cls)]


def check_keys(options: Mapping[str, Any], valid: list[str], where: str) -> None:
    """Raise on the first key of ``options`` not in ``valid``, with the closest valid key (``where``: its prefix)."""
    for key in options:
        if key not in valid:
            close = difflib.get_close_matches(str(key), valid, n=1)
            hint = f" (did you mean '{where}{close[0]}'?)" if close else ""
            listing = ", ".join(where + v for v in valid)
            raise PerfConfigError(f"unknown key '{where}{key}'{hint}; valid keys: {listing}")


def check_activities(activities: tuple[str, ...] | None) -> None:
    """``activities``: None, or each of :data:`ACTIVITIES` at most once (``"gpu"`` and the like get a hint)."""
    if activities is None:
        return
    valid = " and/or ".join(repr(a) for a in ACTIVITIES)
    if not activities:
        raise PerfConfigError(
            f"activities must be a non-empty list of {valid}, got []; omit activities (or set it to null) for CPU "
            "plus CUDA when available"
        )
    for name in activities:
        if name not in ACTIVITIES:
            word = name.lower().rsplit(".", 1)[-1]  # "GPU", "ProfilerActivity.CUDA"
            guess = _ACTIVITY_ALIASES.get(word) or next(iter(difflib.get_close_matches(word, ACTIVITIES, 1, 0.7)), "")
            hint = f" (did you mean '{guess}'?)" if guess else ""
            raise PerfConfigError(f"activities must be {valid}, got {list(activities)}: unknown {name!r}{hint}")
    if len(set(activities)) < len(activities):
        raise PerfConfigError(f"activities must list each of {valid} once, got {list(activities)}")


_ACTIVITY_ALIASES = {"gpu": "cuda", "device": "cuda", "host": "cpu"}


def check_positive(name: str, value: float, maximum: float | None = None) -> None:
    """``value``: a finite number > 0 (and <= ``maximum``; a share given as a percentage gets a hint)."""
    valid = f"in (0, {maximum:g}]" if maximum is not None else "> 0"
    if not math.isfinite(value) or value <= 0 or (maximum is not None and value > maximum):
        hint = ""
        if maximum is not None and maximum < value <= 100 * maximum:
            hint = f" (a share, not a percentage: did you mean {value / 100:g}?)"
        raise PerfConfigError(f"{name} must be a finite number {valid}, got {value!r}{hint}")


def as_real(value: Any) -> float | None:
    """``value`` as a float when it is one number of any numeric type (numpy scalar, 0-d tensor...); else None.

    Example:
        >>> import numpy as np
        >>> as_real(np.int64(3)), as_real(2.5), as_real(True), as_real("3"), as_real([1.0])
        (3.0, 2.5, None, None, None)
    """
    if isinstance(value, bool | str | bytes):
        return None
    if not isinstance(value, numbers.Real):  # a 0-d array or tensor gives its one number
        if getattr(value, "ndim", None) != 0 or not callable(getattr(value, "item", None)):
            return None
        try:
            value = value.item()
        except (TypeError, ValueError, RuntimeError):
            return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return float(value)


def check_int(name: str, value: Any, minimum: int) -> None:
    """``value``: an integer (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PerfConfigError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise PerfConfigError(f"{name} must be >= {minimum}, got {value}")


def check_memory_history(events: int, start: int | None) -> None:
    """``memory_history`` (events kept, 0: off) and ``memory_history_start`` (a step, or None)."""
    check_int("memory_history", events, minimum=0)
    if start is not None:
        check_int("memory_history_start", start, minimum=0)


def check_capture(max_per_hour: int, poll_s: float, signal_name: str | None, all_ranks: bool = False) -> None:
    """The capture options: ``capture_signal`` a signal of this platform or None; ``capture_signal_all_ranks`` both."""
    check_int("capture_max_per_hour", max_per_hour, minimum=0)
    if not math.isfinite(poll_s) or poll_s < 0:
        raise PerfConfigError(f"capture_poll_s must be a finite number >= 0, got {poll_s!r}")
    if all_ranks and (signal_name is None or poll_s == 0):
        raise PerfConfigError(
            f"capture_signal_all_ranks: true needs capture_signal (got {signal_name!r}) and capture_poll_s > 0 (got "
            f"{poll_s!r}): the signal reaches the other ranks as a request file; set both, or remove it"
        )
    if signal_name is not None:
        import signal

        signum = getattr(signal, signal_name, None)
        known = isinstance(signum, signal.Signals) and not signal_name.startswith("SIG_")
        if not known or signum not in _catchable():
            why = "a signal no handler can catch" if known else "no signal of this platform"
            raise PerfConfigError(
                f"capture_signal must name a signal a handler can catch on this platform (e.g. 'SIGUSR2'), got "
                f"{signal_name!r} ({why})"
            )


def _catchable() -> set[signal.Signals]:
    """The signals a Python handler can be installed for: all valid ones but SIGKILL and SIGSTOP."""
    import signal

    return set(signal.valid_signals()) - {getattr(signal, n) for n in ("SIGKILL", "SIGSTOP") if hasattr(signal, n)}


def check_flops(flops_per_step: float | None, peak_tflops: float | None, peak_tbps: float | None) -> None:
    """``flops_per_step``, ``peak_tflops`` and ``peak_tbps``: None or > 0, the peaks in tera units (not FLOP/s)."""
    if flops_per_step is not None:
        check_positive("flops_per_step", flops_per_step)
    if peak_tflops is not None:
        check_positive("peak_tflops", peak_tflops)
        if peak_tflops >= 1e6:
            raise PerfConfigError(f"peak_tflops is in TFLOP/s, got {peak_tflops!r} (did you mean "
                                  f"{peak_tflops / 1e12:g}?)")
    if peak_tbps is not None:
        check_positive("peak_tbps", peak_tbps)
        if peak_tbps >= 1e6:
            raise PerfConfigError(f"peak_tbps is in TB/s, got {peak_tbps!r} (did you mean "
                                  f"{peak_tbps / 1e12:g}?)")


_SCALAR_TYPES: dict[str, tuple[type, ...]] = {
    "output_dir": (str, os.PathLike, type(None)),
    "record_shapes": (bool,),
    "profile_memory": (bool,),
    "with_stack": (bool,),
    "with_flops": (bool,),
    "max_trace_mb": (int, float),
    "nvtx": (bool,),
    "nvtx_domain": (str,),
    "nvtx_modules": (bool,),
    "module_spans": (bool,),
    "nsys_capture": (bool,),
    "log_every_n_steps": (int, type(None)),
    "log_min_interval_s": (int, float),
    "memory": (bool,),
    "nvml": (bool,),
    "degradation_threshold": (int, float),
    "data_wait_threshold": (int, float),
    "data_wait_steps": (int,),
    "check_dataloaders": (bool,),
    "summary": (bool,),
    "top_k": (int,),
    "flops": (bool,),
    "flops_per_step": (int, float, type(None)),
    "peak_tflops": (int, float, type(None)),
    "hang_timeout": (int, float, type(None)),
    "peak_tbps": (int, float, type(None)),
    "capture_on_anomaly": (bool,),
    "capture_max_per_hour": (int,),
    "capture_signal": (str, type(None)),
    "capture_poll_s": (int, float),
    "capture_signal_all_ranks": (bool,),
}
_SEQUENCE_TYPES: dict[str, type] = {"activities": str, "ranks": int, "nsys_steps": int}


def check_types(cfg: object) -> None:
    """The type of each scalar option of ``cfg`` (a ``PerfConfig``), and of the items of its list options."""
    for name, types in _SCALAR_TYPES.items():
        value = getattr(cfg, name)
        numeric = int in types or float in types
        if (numeric and bool not in types and isinstance(value, bool)) or not isinstance(value, types):
            want = " or ".join("None" if t is type(None) else t.__name__ for t in types)
            raise PerfConfigError(f"{name} must be {want}, got {value!r} ({type(value).__name__})")
    for name, item_type in _SEQUENCE_TYPES.items():
        value = getattr(cfg, name)
        if value is None:
            continue
        if not isinstance(value, tuple) or any(
            isinstance(v, bool) or not isinstance(v, item_type) for v in value
        ):
            raise PerfConfigError(f"{name} must be a list of {item_type.__name__}, got {value!r}")


def check_ranks(ranks: Sequence[int] | None, world_size: int | None = None) -> None:
    """Raise :class:`PerfConfigError` unless ``ranks`` is None or distinct global ranks >= 0, below ``world_size``.

    The one check of ``ranks``: :class:`~perf_callbacks.PerfConfig` calls it at construction (no world size yet), and
    every adapter again when it learns the world size, before the first training step.

    Example:
        >>> check_ranks([0, 1], world_size=2)
        >>> check_ranks(None, world_size=1)
        >>> check_ranks([1], world_size=1)
        Traceback (most recent call last):
        ...
        perf_callbacks.exceptions.PerfConfigError: ranks=[1] names ranks beyond the world size 1; valid ranks are 0-0
    """
    if ranks is None:
        return
    if not ranks:
        raise PerfConfigError(
            "ranks must be a non-empty list of global ranks >= 0, got []; omit ranks (or set it to null) to profile "
            "all ranks"
        )
    if any(r < 0 for r in ranks):
        raise PerfConfigError(f"ranks must be global ranks >= 0, got {list(ranks)}")
    twice = sorted({r for r in ranks if list(ranks).count(r) > 1})
    if twice:
        raise PerfConfigError(f"ranks must list each global rank once, got {list(ranks)} (repeated: {twice})")
    if world_size is not None and max(ranks) >= world_size:
        raise PerfConfigError(
            f"ranks={list(ranks)} names ranks beyond the world size {world_size}; "
            f"valid ranks are 0-{world_size - 1}"
        )
