"""The Nsight Systems capture window: ``cudaProfilerStart`` / ``cudaProfilerStop`` around chosen optimizer steps.

Run the training under ``nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop ...`` (the command
``perf-callbacks nsys`` prints it) and nsys records only what happens between :meth:`NsysCapture.start` and
:meth:`NsysCapture.stop`: the profiling window, or ``nsys_steps=[first, last]``. Without CUDA (a CPU build, no device)
the capture warns once and does nothing; a failing CUDA call switches it off with one warning and never raises.

"""

from __future__ import annotations

import logging
import shlex
from typing import Any

from perf_callbacks.core.warn import warn_user
from perf_callbacks.exceptions import InstrumentUnavailableWarning

log = logging.getLogger(__name__)


#: Trace CUDA API + kernels, NVTX ranges and OS runtime calls; record only between cudaProfilerStart and Stop, and let
#: the application run on after the capture (the default ``stop-shutdown`` would kill the training at the stop).
#: ``--cuda-memory-usage`` is left off: nsys documents it as possibly causing significant runtime overhead.
NSYS_FLAGS = ("-t", "cuda,nvtx,osrt", "--capture-range=cudaProfilerApi", "--capture-range-end=stop")


def nsys_command(cmd: list[str], output: str = "perf_callbacks") -> list[str]:
    """Build the ``nsys profile`` command line that records the capture window of training command ``cmd``.

    Example:
        >>> nsys_command(["python", "train.py"], "run1")[-6:]
        ['-o', 'run1', '--force-overwrite', 'true', 'python', 'train.py']
    """
    return ["nsys", "profile", *NSYS_FLAGS, "-o", output, "--force-overwrite", "true", *cmd]


def nsys_guide(cmd: list[str], output: str = "perf_callbacks") -> str:
    """Explain, as shell comments, how to turn the capture on, read the report and capture several ranks."""
    report = f"{output}.nsys-rep"
    per_rank = shlex.join(nsys_command(cmd, output + ".%q{RANK}"))
    return f"""\
# Records only the steps between cudaProfilerStart and cudaProfilerStop, which perf-callbacks calls with
#   nsys_capture: true          # in the config: around the profiling window
#   nsys_steps: [first, last]   # optional: around these optimizer steps instead
# Without nsys_capture nothing is recorded (nsys waits for a cudaProfilerStart that never comes).
# Training runs on after the capture (--capture-range-end=stop).
#
# Read the report:
#   nsys stats --report nvtx_sum,cuda_gpu_kern_sum {report}
#   or open {report} in the Nsight Systems GUI: the NVTX row of domain "perf_callbacks" shows
#   step (payload = step number) > data_wait / forward / backward / optimizer_step, the kernels of each range below.
#
# Several ranks: one report per rank, with nsys inside the launcher (%q{{RANK}} expands torchrun's RANK variable):
#   torchrun --nproc-per-node=N --no-python {per_rank}
#   `ranks: [0]` in the config limits the capture to rank 0.
# Run it directly: perf-callbacks nsys --run -- {shlex.join(cmd)}"""


class NsysCapture:
    """Starts and stops the CUDA profiler API so that ``nsys --capture-range=cudaProfilerApi`` records a window.

    Idempotent: a second :meth:`start` while capturing does nothing, :meth:`stop` without a capture does nothing and
    :meth:`close` stops a capture that is still running.

    Args:
        enabled: when False every call is a no-op.
        ranks: the global ranks that capture; ``None`` means every rank.
        rank: this process's global rank.

    Example:
        >>> capture = NsysCapture(enabled=True, ranks={0}, rank=1)  # rank 1 is not selected: a no-op
        >>> capture.start(10); capture.stop(12); capture.capturing
        False
    """

    def __init__(self, enabled: bool, ranks: set[int] | None = None, rank: int = 0) -> None:
        self.rank = rank
        self._warn_here = rank == 0 or (ranks is not None and rank == min(ranks, default=rank))
        self._enabled = enabled and (ranks is None or rank in ranks)
        self._capturing = False
        self._start_step: int | None = None

    @property
    def enabled(self) -> bool:
        """Whether this process takes part in the capture (False once disabled by a failure)."""
        return self._enabled

    @property
    def capturing(self) -> bool:
        """Whether ``cudaProfilerStart`` has been called and not yet matched by ``cudaProfilerStop``."""
        return self._capturing

    def start(self, step: int) -> None:
        """Start the capture at optimizer step ``step`` (call it before the step's work)."""
        if not self._enabled or self._capturing:
            return
        cuda = self._cuda()
        if cuda is None:
            return
        try:
            cuda.synchronize()  # earlier steps' kernels stay out of the capture
            cuda.profiler.start()
        except Exception as err:  # noqa: BLE001 - never harm training
            self._disable(f"cudaProfilerStart failed at step {step}: {type(err).__name__}: {err}")
            return
        self._capturing = True
        self._start_step = step
        log.info("nsys capture started at step %d (rank %d)", step, self.rank)

    def stop(self, step: int) -> None:
        """Stop the capture after optimizer step ``step`` (call it after the step's work)."""
        if not self._capturing:
            return
        self._capturing = False
        cuda = self._cuda()
        if cuda is None:
            return
        try:
            cuda.synchronize()  # the last step's kernels finish inside the capture
            cuda.profiler.stop()
        except Exception as err:  # noqa: BLE001
            self._disable(f"cudaProfilerStop failed at step {step}: {type(err).__name__}: {err}")
            return
        log.info("nsys capture stopped after step %d (steps %s-%d, rank %d)", step, self._start_step, step, self.rank)

    def close(self) -> None:
        """Stop a capture that is still running, e.g. when training ends inside the window."""
        if self._capturing:
            self.stop(self._start_step if self._start_step is not None else -1)

    def _cuda(self) -> Any:
        """``torch.cuda`` when it can drive the profiler API, else None (after disabling with a warning)."""
        try:
            import torch

            if torch.cuda.is_available():
                return torch.cuda
            reason = (
                "this torch build has no CUDA" if torch.version.cuda is None else "torch.cuda.is_available() is False"
            )
        except Exception as err:  # noqa: BLE001
            reason = f"torch.cuda failed: {type(err).__name__}: {err}"
        self._disable(f"nsys capture needs CUDA, but {reason}")
        return None

    def _disable(self, reason: str) -> None:
        self._enabled = False
        self._capturing = False
        if self._warn_here:
            warn_user(
                f"{reason}. The Nsight Systems capture window is off and training continues; under "
                "`nsys profile --capture-range=cudaProfilerApi` nothing will be recorded. Set nsys_capture=False "
                "to silence this, or run on a CUDA device.",
                InstrumentUnavailableWarning,
            )
