"""The raw facts behind the bandwidth, launch and memory figures, kept while a trace streams in.

``events._Collector`` hands each relevant event to an ``ExtraEvents`` held by the ``RankTrace``: memcpy sizes, the
arguments that NCCL kernels and ``record_param_comms`` carry (``Collective name``, ``In msg nelems``, ``Out msg
nelems``, ``dtype``, ``Group size``, the process group), the shapes of gloo/nccl host spans (with
``record_shapes=True``), the kernel launch calls, and the ``[memory]`` events. Only small tuples are kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

COMM_KEYS = ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size", "Process Group Name",
             "Process Group Description", "Seq")
"""The arguments of a collective that the figures use."""
_LAUNCH = re.compile(r"Launch\w*Kernel")

Copy = tuple[float, float, int, str, Any]
"""``(start, end, device, name, bytes)``; bytes as the trace has it (None when absent)."""
Nccl = tuple[float, float, int, str, "dict[str, Any] | None", Any, Any]
"""``(start, end, device, kernel name, collective arguments or None, External id, correlation)``."""
# The positions in an Nccl row after its (start, end) (the ids in the other order than in a device row), as literals
# (Final) so that type checkers know each field's type.
NCCL_DEVICE: Final = 2
NCCL_NAME: Final = 3
NCCL_ARGS: Final = 4
NCCL_EXTERNAL_ID: Final = 5
NCCL_CORRELATION: Final = 6
HostComm = tuple[float, float, str, Any, Any, Any]
"""``(start, end, span name, Input Dims, Input type, thread)`` of a ``gloo:``/``nccl:`` host span."""
# The positions in a HostComm row after its (start, end).
HOST_COMM_NAME: Final = 2
HOST_COMM_DIMS: Final = 3
HOST_COMM_TYPES: Final = 4
HOST_COMM_THREAD: Final = 5
FOREIGN_MODULE_PREFIX: Final = "nn.Module: "
"""PyTorch's own module spans (``with_modules=True``): ``nn.Module: Linear_0`` names the class and its instance."""
GATHER_OPS: Final = ("c10d::_allgather_base_", "c10d::_allgather_base")
"""The host ops of an all-gather into one tensor: ``Input Dims`` ``[output, input, ...]`` (output = input x ranks)."""
Memory = tuple[float, Any, Any, Any, Any, Any]
"""``(ts, tid, Bytes, Total Allocated, Device Type, Addr)`` of a ``[memory]`` event."""
ModuleSpan = tuple[float, float, Any, str]
"""``(start, end, thread, module path)`` of a module span (``module_spans``)."""
SeqOp = tuple[float, float, Any, int, bool]
"""``(start, end, thread, Sequence number, backward)`` of a cpu op with an autograd sequence number; ``backward``: an
``autograd::engine::evaluate_function:`` op, which runs the node that the forward op of that number created."""
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "


@dataclass
class ExtraEvents:
    """What ``events._Collector`` keeps for the communication, transfer, launch and memory figures.

    Args:
        copies: every memcpy.
        nccl: every NCCL kernel, with its collective arguments when the kernel carries them.
        param_comms: ``External id`` -> collective arguments of each ``record_param_comms`` op.
        host_comms: every ``gloo:``/``nccl:`` host span.
        launch_calls: correlation id -> ``(start, duration)`` of each kernel launch call (``cudaLaunchKernel``...).
        memory: every ``[memory]`` event.
        shapes: ``External id`` -> ``(Input Dims, Input type, Concrete Inputs)`` of each op the roofline knows
            (``op_cost.KNOWN``), when the trace recorded shapes.
        module_spans: every module span.
        foreign_modules: every ``nn.Module:`` span (its name after the prefix in the path's place).
        gather_ops: every ``GATHER_OPS`` op with ``Input Dims``, as a ``HostComm`` row.
        seq_ops: every cpu op with a sequence number (forward ops, and the backward's node evaluations).
    """

    copies: list[Copy] = field(default_factory=list)
    nccl: list[Nccl] = field(default_factory=list)
    param_comms: dict[Any, dict[str, Any]] = field(default_factory=dict)
    host_comms: list[HostComm] = field(default_factory=list)
    launch_calls: dict[Any, tuple[float, float]] = field(default_factory=dict)
    memory: list[Memory] = field(default_factory=list)
    shapes: dict[Any, tuple[Any, Any, Any]] = field(default_factory=dict)
    module_spans: list[ModuleSpan] = field(default_factory=list)
    foreign_modules: list[ModuleSpan] = field(default_factory=list)
    gather_ops: list[HostComm] = field(default_factory=list)
    seq_ops: list[SeqOp] = field(default_factory=list)

    def gpu(self, row: tuple[float, float, str, str, int, Any, Any], args: dict[str, Any]) -> None:
        """A device event, as ``events`` keeps it: ``(start, end, kind, name, device, correlation, External id)``."""
        ts, end, kind, name, device, corr, ext = row
        if kind == "memcpy":
            dma = args.get("size") if name.startswith("dma") else None  # an MTIA DMA says ``size``
            self.copies.append((ts, end, device, name, args.get("bytes", dma)))
        elif kind == "kernel" and "nccl" in name.lower():
            self.nccl.append((ts, end, device, name, comm_args(args), ext, corr))

    def cpu_op(self, args: dict[str, Any]) -> None:
        """A ``record_param_comms`` op."""
        found = comm_args(args)
        ext = args.get("External id", args.get("external id"))
        if found is not None and isinstance(ext, (int, str)):
            self.param_comms[ext] = found

    def runtime(self, name: str, ts: float, dur: float, corr: Any) -> None:
        """A runtime call with a correlation id; kept when it launches a kernel."""
        if isinstance(corr, (int, str)) and _LAUNCH.search(name):
            self.launch_calls[corr] = (ts, dur)

    def host_comm(self, ts: float, end: float, name: str, args: dict[str, Any], tid: Any = None) -> None:
        """A ``gloo:``/``nccl:`` annotation span on thread ``tid``."""
        self.host_comms.append((ts, end, name, args.get("Input Dims"), args.get("Input type"), tid))

    def seq_op(self, ts: float, end: float, tid: Any, name: str, seq: Any) -> None:
        """A cpu op with a ``Sequence number``."""
        if isinstance(seq, int) and not isinstance(seq, bool):
            self.seq_ops.append((ts, end, tid, seq, name.startswith(BACKWARD_PREFIX)))

    def memory_event(self, e: dict[str, Any]) -> None:
        """A ``[memory]`` instant event."""
        args = e["args"]
        self.memory.append((e["ts"], e.get("tid"), args.get("Bytes"), args.get("Total Allocated"),
                            args.get("Device Type"), args.get("Addr")))


def comm_args(args: dict[str, Any]) -> dict[str, Any] | None:
    """The collective arguments of an event (``COMM_KEYS`` present), or None when it names no collective."""
    if not args.get("Collective name"):
        return None
    return {k: args[k] for k in COMM_KEYS if k in args}


def nested_paths(spans: list[ModuleSpan]) -> list[ModuleSpan]:
    """``nn.Module:`` spans as module paths.

    Each name goes under the names of the spans that hold it on its thread; when one module holds all the others
    (the model), it is the root (``""``) and left out of the paths.

    Example:
        >>> nested_paths([(0, 9, 1, "Net_0"), (1, 3, 1, "Block_0"), (2, 3, 1, "Linear_0"), (4, 5, 1, "Block_1")])
        [(0, 9, 1, ''), (1, 3, 1, 'Block_0'), (2, 3, 1, 'Block_0.Linear_0'), (4, 5, 1, 'Block_1')]
    """
    out: list[ModuleSpan] = []
    stack: list[ModuleSpan] = []
    for ts, end, tid, name in sorted(spans, key=lambda s: (str(s[2]), s[0], -s[1])):
        while stack and (stack[-1][2] != tid or stack[-1][1] <= ts):
            stack.pop()
        path = f"{stack[-1][3]}.{name}" if stack else name
        stack.append((ts, end, tid, path))
        out.append((ts, end, tid, path))
    roots = {p.split(".", 1)[0] for _, _, _, p in out}
    if len(roots) != 1:
        return out
    return [(ts, end, tid, p.split(".", 1)[1] if "." in p else "") for ts, end, tid, p in out]
