"""Which rank is where in a hang: the ``hang-rank{R}/`` folders the watchdog wrote (``core/hang/dump.py``), read.

Each rank is either in a collective, or elsewhere. The collective comes from torch's Flight Recorder
(``flight_recorder*.json``: the rank's first collective that has not completed, with its sequence number, process
group and size), else from the training thread's stack (a ``torch.distributed`` collective on it). Elsewhere is the
innermost frame of the user's own code on the training thread. Ranks that wait in the same collective are grouped;
a rank whose Flight Recorder never enqueued that collective "never entered it".

Example:
    >>> rank_ranges([0, 1, 2, 5, 7, 8])
    'ranks 0-2, 5, 7-8'
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perf_callbacks._input_files import read_json

__all__ = ["HangRank", "find_hangs", "hang_html", "hang_lines", "hang_only", "read_hangs", "rank_ranges"]
HANG_FOLDER = "hang-rank"
COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all", "all_to_all_single",
    "barrier", "monitored_barrier", "broadcast", "broadcast_object_list", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "gather", "gather_object", "scatter", "scatter_object_list", "send", "recv", "isend",
    "irecv", "batch_isend_irecv", "all_reduce_coalesced",
})  # fmt: skip
_DTYPE_BYTES = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Long": 8, "Int": 4, "Short": 2, "Char": 1,
                "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16}  # fmt: skip


@dataclass
class HangRank:
    """One rank's place in the hang.

    Args:
        rank: the global rank.
        step: the open step; phase: the open phase (``data_wait``, ``forward``...).
        waited_s: how long no step had completed when the watchdog wrote; timeout_s: the timeout then in force.
        where: the innermost frame of the user's code on the training thread (``train.py:88 load_batch``).
        collective: the collective it waits in, ``{op, seq, group, bytes, source}`` (source: ``flight recorder`` or
            ``stack``), None when it is in none.
        last_seq: per process group, the last collective the Flight Recorder saw it enqueue.
        resumed: ``{steps_run, after_s}`` when steps resumed after the folder was written, or the run ended cleanly
            (a stall, not a hang).
        aside: what the watchdog saw it in (``validation``, ``checkpoint``, ``between steps``, ``own code``,
            ``compiling``), if any.
    """

    rank: int
    step: int | None
    phase: str | None
    waited_s: float
    timeout_s: float
    where: str
    collective: dict[str, Any] | None = None
    last_seq: dict[str, int] = field(default_factory=dict)
    resumed: dict[str, Any] | None = None
    aside: str | None = None
    path: str = ""


def find_hangs(path: str | Path) -> list[Path]:
    """The ``hang-rank{R}`` folders holding a ``hang.json`` at or under ``path``, by rank."""
    root = Path(path)
    if not root.is_dir():
        return []
    found = [root] if (root / "hang.json").is_file() else [p.parent for p in root.rglob("hang.json")]
    return sorted((p for p in found if p.name.startswith(HANG_FOLDER)), key=lambda p: (str(p.parent), p.name))


def read_hangs(path: str | Path) -> dict[str, Any] | None:
    """The ``hang`` block of the report for ``path`` (``{ranks, missing, summary}``), None without a hang folder."""
    ranks, world = [], 0
    for folder in find_hangs(path):
        try:
            data = read_json(folder / "hang.json")
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("rank"), int):
            ranks.append(_rank(folder, data))
            world = max(world, int(data.get("world_size") or 0))
    if not ranks:
        return None
    ranks.sort(key=lambda r: r.rank)
    seen = {r.rank for r in ranks}
    missing = [r for r in range(world) if r not in seen]
    return {"ranks": [asdict(r) for r in ranks], "missing": missing, "summary": _summary(ranks, missing)}


def hang_lines(hang: dict[str, Any]) -> list[str]:
    """The report's ``hang:`` block from :func:`read_hangs`'s data."""
    lines = ["hang (no step completed; from the hang-rank folders):"]
    lines += [f"  {s}" for s in hang["summary"]]
    for r in hang["ranks"]:
        coll = r["collective"]
        inside = f"in {_collective(coll)} ({coll['source']})" if coll else "in no collective"
        aside = f", {r['aside']}" if r.get("aside") else ""
        lines.append(f"  rank {r['rank']}: step {r['step']}, phase {r['phase']}{aside}, no step for "
                     f"{r['waited_s']:.0f} s; {inside}; stack in `{r['where']}`")  # fmt: skip
    return lines


def rank_ranges(ranks: list[int]) -> str:
    """``rank 3`` or ``ranks 0-2, 5``."""
    parts: list[str] = []
    for r in sorted(ranks):
        if parts and parts[-1].split("-")[-1] == str(r - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{r}"
        else:
            parts.append(str(r))
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(parts)}"


def _rank(folder: Path, data: dict[str, Any]) -> HangRank:
    frames = _training_frames(data.get("threads") or [])
    recorded = _flight_recorders(folder, data)
    collective, last = _in_flight(recorded)
    if collective is None:
        collective = _from_stack(frames)
    return HangRank(rank=data["rank"], step=data.get("step"), phase=data.get("phase"),
                    waited_s=float(data.get("waited_s") or 0.0), timeout_s=float(data.get("timeout_s") or 0.0),
                    where=_where(frames), collective=collective, last_seq=last, resumed=data.get("resumed"),
                    aside=data.get("aside"), path=str(folder))  # fmt: skip


def _training_frames(threads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    main = next((t for t in threads if t.get("training")), threads[0] if threads else None)
    return list(main.get("frames") or []) if main else []


def _where(frames: list[dict[str, Any]]) -> str:
    """The innermost frame of the user's own code, else the innermost frame."""
    frame = next((f for f in reversed(frames) if not f.get("library")), frames[-1] if frames else None)
    if frame is None:
        return "unknown (no Python stack recorded)"
    name = str(frame.get("file", "?")).replace("\\", "/").rsplit("/", 1)[-1]
    return f"{name}:{frame.get('line')} {frame.get('function')}"


def _flight_recorders(folder: Path, data: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name in data.get("flight_recorder") or []:
        try:
            dump = read_json(folder / str(name))
        except (OSError, ValueError):
            continue
        if isinstance(dump, dict):
            out.append(dump)
    return out


def _in_flight(dumps: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, dict[str, int]]:
    """The first collective not completed (lowest record id) and, per group, the last one enqueued."""
    pending: list[tuple[int, str, int, dict[str, Any]]] = []
    last: dict[str, int] = {}
    for dump in dumps:
        for entry in dump.get("entries") or []:
            if not isinstance(entry, dict):
                continue
            group = _group(entry)
            seq = int(entry.get("p2p_seq_id" if entry.get("is_p2p") else "collective_seq_id") or 0)
            last[group] = max(last.get(group, 0), seq)
            if not entry.get("retired") and entry.get("state") != "completed":
                pending.append((int(entry.get("record_id") or 0), group, seq, entry))
    if not pending:
        return None, last
    _, group, seq, entry = min(pending, key=lambda p: p[0])
    op = str(entry.get("profiling_name") or "?").split(":")[-1]
    return {"op": op, "seq": seq, "group": group, "bytes": _bytes(entry), "source": "flight recorder"}, last


def _group(entry: dict[str, Any]) -> str:
    pg = entry.get("process_group") or []
    name = pg[1] if len(pg) > 1 and pg[1] else pg[0] if pg else "?"
    return "default" if name == "default_pg" else str(name)


def _bytes(entry: dict[str, Any]) -> int | None:
    sizes, dtypes = entry.get("input_sizes") or [], entry.get("input_dtypes") or []
    if len(sizes) != len(dtypes) or not sizes or any(d not in _DTYPE_BYTES for d in dtypes):
        return None
    return int(sum(math.prod(s) * _DTYPE_BYTES[d] for s, d in zip(sizes, dtypes, strict=True)))


def _from_stack(frames: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The innermost ``torch.distributed`` collective on the training thread's stack."""
    for f in reversed(frames):
        path = str(f.get("file", "")).replace("\\", "/")
        if "torch/distributed/" in path and f.get("function") in COLLECTIVES:
            return {"op": f["function"], "seq": None, "group": None, "bytes": None, "source": "stack"}
    return None


def _collective(c: dict[str, Any]) -> str:
    seq = f" #{c['seq']:,}" if c.get("seq") else ""
    details = [f"process group {c['group']}"] if c.get("group") else []
    details += [_size(c["bytes"])] if c.get("bytes") else []
    return f"{c['op']}{seq}" + (f" ({', '.join(details)})" if details else "")


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def _summary(ranks: list[HangRank], missing: list[int]) -> list[str]:
    """One sentence per collective the ranks wait in, then who is elsewhere and why."""
    waiting: dict[tuple[str, Any, Any], list[HangRank]] = {}
    for r in ranks:
        if r.collective is not None and r.resumed is None:
            c = r.collective
            waiting.setdefault((c["op"], c["seq"], c["group"]), []).append(r)
    groups = sorted(waiting.values(), key=lambda g: -len(g))
    lines = []
    for members in groups:
        first = members[0].collective or {}
        verb = "waits" if len(members) == 1 else "wait"
        line = f"{rank_ranges([m.rank for m in members])} {verb} in {_collective(first)}"
        absent = [r for r in ranks if r.collective is None and r.resumed is None]
        if members is groups[0] and absent:
            line += "; " + "; ".join(_absent(r, first) for r in absent)
        lines.append(line)
    if not groups:
        lines += [f"rank {r.rank} is in no collective: its stack is in `{r.where}`" for r in ranks if r.resumed is None]
    lines += [f"rank {r.rank} resumed {r.resumed.get('after_s', 0):.0f} s after it wrote: a stall, not a hang"
              for r in ranks if r.resumed is not None]  # fmt: skip
    if missing:
        lines.append(f"no hang folder from {rank_ranges(missing)} (it kept completing steps, or wrote elsewhere)")
    return lines


def _absent(r: HangRank, collective: dict[str, Any]) -> str:
    """``rank 3 never entered it: its stack is in `train.py:88 load_batch```."""
    last = r.last_seq.get(collective.get("group") or "", None)
    seq = collective.get("seq")
    if seq and last is not None and last < seq:
        return f"rank {r.rank} never entered it (its last there: #{last:,}): its stack is in `{r.where}`"
    return f"rank {r.rank} is in no collective: its stack is in `{r.where}`"


def hang_only(path: str | Path, as_json: bool) -> str | None:
    """The report of a folder with hang folders and no trace (``{"hang": ...}`` in JSON), None without a hang."""
    hang = read_hangs(path)
    if hang is None:
        return None
    if as_json:
        return json.dumps({"path": str(path), "hang": hang}, indent=2) + "\n"
    return "\n".join([f"perf-callbacks report: {path}", *hang_lines(hang)]) + "\n"


def hang_html(hang: dict[str, Any]) -> str:
    """The HTML report's hang section: the same lines as the text report's."""
    from html import escape

    head, *rows = hang_lines(hang)
    return f"<h2>{escape(head.rstrip(':'))}</h2><ul>" + "".join(f"<li>{escape(r.strip())}</li>" for r in rows) + "</ul>"
