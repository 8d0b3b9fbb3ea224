"""What the trace reader keeps and calls it: categories, calls, span prefixes, collectives, and its rows' fields.

The event categories and calls the analysis reads, our own spans' prefixes, the collectives' names, and the positions
of the fields in the rows that ``events`` keeps (``RankTrace.gpu``, ``.steps``, ``.cpu_ops``). Every such row starts
with its ``(start, end)`` in microseconds, as a ``Span`` does, except a step's, which starts with its number. The rows
stay plain tuples (one is built for every event kept: a NamedTuple costs a call each), read by position through the
names here.
"""

from __future__ import annotations

import re
from typing import Final

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "Kernel": "kernel", "Memcpy": "memcpy",
            "Memset": "memset", "mtia_ccp_events": "kernel"}
"""Device activity categories: Kineto's, PyTorch 1.8-1.13's (``Kernel``, ``Memcpy``, ``Memset``) and MTIA's."""
DEVICE_EVENT = "event"
"""The kind of a device-side event record or wait (MTIA's ``event_record``/``event_wait``): neither a kernel nor a
copy; the device's queue waits on another stream's event. Busy time as HTA counts it, but not work."""
CATEGORY = {
    "cpu_op": "cpu_op", "Operator": "cpu_op",
    "cuda_runtime": "runtime", "cuda_driver": "runtime", "Runtime": "runtime", "mtia_runtime": "runtime",
    "user_annotation": "annotation", "User annotation": "annotation",
    "python_function": "python", "Python function": "python",
    "cpu_instant_event": "instant",
    "cuda_profiler_range": "profiler_range",
    **dict.fromkeys(GPU_CATS, "gpu"),
}
"""Every category the analysis reads, old names mapped onto the current ones."""
GRAPH_LAUNCHES = frozenset({"cudaGraphLaunch", "cudaGraphLaunch_v10000", "hipGraphLaunch", "cuGraphLaunch"})
SYNC_CALLS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "cuMemcpyDtoH_v2",
        "aten::item",
        "aten::_local_scalar_dense",
    }
)
HOLDING_CALLS = frozenset(
    {"hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize", "hipMemcpy", "hipMemcpyWithStream"}
)
"""HIP's blocking calls: kept with the syncs, but only a gap they hold from end to end is put down to them (the
device idled while the host sat in one); the "idled as it returned" rule is CUDA's (``SYNC_CALLS``)."""
OWN_SPAN_PREFIX = "perf_callbacks."
MODULE_PREFIX = "perf_callbacks.module/"
"""A module's span (``module_spans``): the prefix, then the module's path (``core/module_spans.py``)."""
_COLLECTIVES = ("AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Broadcast", "Reduce", "Gather", "Scatter",
                "SendRecv", "Send", "Recv", "Barrier")
_NCCL = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
_MEMCPY = re.compile(r"Memcpy (\w+)")
COPY_KINDS = ("memcpy", "memset")
"""The kinds of device activity that are copies (the rest: kernels and ``DEVICE_EVENT`` records and waits)."""

GpuRow = tuple[float, float, str, str, int, int, int]
"""A device event (``RankTrace.gpu``): ``(start, end, kind, name, device, correlation, External id)``."""
# The positions in a GpuRow after its (start, end), as literals (Final) so that type checkers know each field's type:
# its kind (kernel, memcpy, memset, DEVICE_EVENT), its name, its device, the correlation id of its launch call, and
# the External id of the op that launched it (-1 for none).
GPU_KIND: Final = 2
GPU_NAME: Final = 3
GPU_DEVICE: Final = 4
GPU_CORRELATION: Final = 5
GPU_EXTERNAL_ID: Final = 6
# The positions in a RankTrace.steps row, (ProfilerStep number, start, end, thread).
STEP_NUMBER: Final = 0
STEP_START: Final = 1
STEP_END: Final = 2
STEP_THREAD: Final = 3
# The positions in a RankTrace.cpu_ops row after its (start, end): (start, end, thread, name).
OP_THREAD: Final = 2
OP_NAME: Final = 3


_DMA = {"HOST_TO_DEVICE": "HtoD", "DEVICE_TO_HOST": "DtoH", "DEVICE_TO_DEVICE": "DtoD"}
"""MTIA's ``direction`` argument of a ``dma_request``, which the reader appends to its name
(``dma_request HOST_TO_DEVICE``)."""


def _dma_direction(name: str) -> str:
    """``HtoD``... from an MTIA DMA's name with its direction appended; ``DMA`` when it says none."""
    return next((short for long, short in _DMA.items() if name.endswith(long)), "DMA")


def mtia_kind(name: str) -> str:
    """The kind of an ``mtia_ccp_events`` event: ``dma_*`` copies are ``memcpy``, ``event_*`` are ``DEVICE_EVENT``.

    Example:
        >>> mtia_kind("dma_request"), mtia_kind("event_wait"), mtia_kind("fc-dtype_Float")
        ('memcpy', 'event', 'kernel')
    """
    if name.startswith("dma"):
        return "memcpy"
    return DEVICE_EVENT if name.startswith("event_") else "kernel"


def collective_name(raw: str) -> str:
    """Return the usual spelling of a collective (``allreduce``, ``AllReduce``, ``all_reduce`` -> ``AllReduce``).

    Example:
        >>> collective_name("reduce_scatter_tensor_coalesced")
        'ReduceScatter'
    """
    key = raw.lower().replace("_", "")
    for known in _COLLECTIVES:
        if key.startswith(known.lower()):
            return known
    return raw


def nccl_collective(kernel: str) -> str | None:
    """Return the collective of an NCCL kernel name such as ``ncclDevKernel_AllGather_RING_LL``, else None."""
    match = _NCCL.search(kernel)
    return collective_name(match.group(1)) if match else None


def copy_kind(kind: str, name: str) -> str:
    """``HtoD/pageable``, ``DtoD/device``, ``memset``...: direction and host memory of a copy or memset.

    A copy to or from the host whose name does not say pageable or pinned (HIP's ``Memcpy HtoD (Host -> Device)``)
    is ``host``: never ``device``.

    Example:
        >>> copy_kind("memcpy", "Memcpy HtoD (Pageable -> Device)"), copy_kind("memcpy", "Memcpy DtoH (Device -> Host)")
        ('HtoD/pageable', 'DtoH/host')
    """
    if kind == "memset":
        return "memset"
    match = _MEMCPY.match(name)
    direction = match.group(1) if match else _dma_direction(name) if name.startswith("dma") else "other"
    memory = "pageable" if "Pageable" in name else "pinned" if "Pinned" in name else \
        "host" if "H" in direction else "device"
    return f"{direction}/{memory}"
