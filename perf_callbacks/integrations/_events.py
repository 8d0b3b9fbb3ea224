"""Our own TensorBoard event file, for adapters whose framework has no tracker configured."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class OwnEvents:
    """Opens the event file on first use (a ``SummaryWriter`` costs tens of ms to create) and closes it once."""

    log_dir: Path
    _writer: Any = None

    def close(self) -> None:
        """Flush and close our own event file, if one was opened."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _summary_writer(self) -> Any:
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.log_dir))
        return self._writer
