"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def fresh_accelerate_state() -> Iterator[None]:
    """Accelerate keeps process-wide singletons: reset them around a test that builds an ``Accelerator``."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
