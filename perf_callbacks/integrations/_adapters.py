"""What every adapter does the same way.

The checkpoint and validation ranges around a framework's own methods, the batch size of a batch, whether
``torch.distributed`` is up, and the constructors of the adapters built from ``config=`` or options
(:class:`FromConfig`).

Example:
    >>> import torch
    >>> batch_size({"input_ids": torch.zeros(8, 128), "labels": torch.zeros(8)})
    8
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from perf_callbacks.config import PerfConfig
from perf_callbacks.core.memory.sampler import OutOfMemoryError
from perf_callbacks.exceptions import PerfConfigError

if TYPE_CHECKING:
    from typing_extensions import Self

    from perf_callbacks.core.engine.engine import PerfEngine

MARK = "__perf_callbacks__"  # set on every wrapper we install, so it is recognised and removed, never stacked


def in_phase(live: Callable[[], PerfEngine | None], phase: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Wrap a framework method (a checkpoint save, an evaluation, ``backward``) in the engine's ``phase`` range.

    While ``live()`` returns an engine, each call runs in that range; ``checkpoint`` and ``validation`` time is left
    out of step time and data wait. An out-of-memory error inside it is noted with the phase before it propagates.
    """

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            engine = live()
            if engine is None:
                return method(*args, **kwargs)
            start, end = _RANGES.get(phase, (lambda e: e.phase(phase), lambda e: e.end_phase()))
            start(engine)
            try:
                return method(*args, **kwargs)
            except OutOfMemoryError as err:
                engine.note_failure(err, phase)
                raise
            finally:
                end(engine)

        setattr(wrapped, MARK, True)
        return wrapped

    return wrap


_RANGES: dict[str, tuple[Callable[[PerfEngine], None], Callable[[PerfEngine], None]]] = {
    "checkpoint": (lambda e: e.checkpoint_start(), lambda e: e.checkpoint_end()),
    "validation": (lambda e: e.validation_start(), lambda e: e.validation_end()),
}


def is_ours(fn: Any) -> bool:
    """``fn`` is a wrapper perf-callbacks installed."""
    return bool(getattr(fn, MARK, False))


def batch_size(batch: Any) -> int | None:
    """The leading dimension of the first tensor in ``batch`` (a tensor, a mapping or a sequence), else None."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else None
    values = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, list | tuple) else ()
    return next((n for n in map(batch_size, values) if n is not None), None)


def distributed_initialized() -> bool:
    """``torch.distributed`` is available and its default process group is up."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


class FromConfig:
    """An adapter made from a ready ``config=PerfConfig(...)`` or from its keys (Accelerate's, transformers').

    Args:
        config: the configuration; None to build one from ``options``.
        **options: :class:`PerfConfig` keys; not with ``config``.
    """

    def __init__(self, config: PerfConfig | None = None, **options: Any) -> None:
        if config is not None and options:
            raise PerfConfigError(f"pass either config= or options, not both (got config= and {sorted(options)})")
        self.config = config if config is not None else PerfConfig.from_dict(options)

    @classmethod
    def from_config(cls, config: PerfConfig) -> Self:
        """Build from an existing :class:`PerfConfig`."""
        return cls(config=config)

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> Self:
        """Build from a standalone YAML file with the config keys at the top level."""
        return cls(config=PerfConfig.from_yaml(path))
