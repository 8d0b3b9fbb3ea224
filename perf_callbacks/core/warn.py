"""Warnings that point at the user's code and start with ``perf-callbacks:``.

A warning raised from inside a Trainer hook would otherwise be attributed to ``engine.py`` or to Lightning's loop,
which tells the user nothing; the warning is attributed to the first frame on the stack outside perf-callbacks and
the training frameworks (the user's ``trainer.fit(...)`` line or training loop).
"""

from __future__ import annotations

import sys
import warnings
from types import FrameType

PREFIX = "perf-callbacks: "
_FRAMEWORKS = frozenset(
    {"perf_callbacks", "lightning", "pytorch_lightning", "lightning_fabric", "accelerate", "transformers", "torch",
     "contextlib", "threading", "typing_extensions"}
)


def warn_user(message: str, category: type[Warning]) -> None:
    """Emit ``message`` as ``category``, attributed to the user's code."""
    text = message if message.startswith(PREFIX) else PREFIX + message
    warnings.warn(text, category, stacklevel=user_stacklevel())


def user_stacklevel() -> int:
    """The ``stacklevel`` (relative to the caller of :func:`warn_user`) of the first frame outside the frameworks."""
    frame: FrameType | None = sys._getframe(2)  # the caller of warn_user
    level = 2
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module.split(".", 1)[0] not in _FRAMEWORKS:
            return level
        frame, level = frame.f_back, level + 1
    return 2


class WarnOnce:
    """Each warning once per key, on the main rank unless ``main_only=False``; attributed to the user's code.

    Args:
        is_main: this process is rank 0.
    """

    def __init__(self, is_main: bool) -> None:
        self.is_main = is_main
        self.said: set[str] = set()

    def __call__(self, key: str, category: type[Warning], message: str, main_only: bool = True) -> None:
        """Warn ``message`` under ``key`` unless it was already said (or this is not the main rank)."""
        if key in self.said or (main_only and not self.is_main):
            return
        self.said.add(key)
        warnings.warn(message if message.startswith(PREFIX) else PREFIX + message, category,
                      stacklevel=user_stacklevel())
