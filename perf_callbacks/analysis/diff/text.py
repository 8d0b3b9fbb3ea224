"""The readable comparison printed by ``perf-callbacks diff``: verdict change and new advice first, then the numbers."""

from __future__ import annotations

from typing import Any

from perf_callbacks.analysis.diff.compare import DiffResult
from perf_callbacks.analysis.diff.gains import estimate_lines
from perf_callbacks.analysis.diff.measures import measure_diff_lines
from perf_callbacks.analysis.diff.memory import category_diff_lines, changed_line
from perf_callbacks.analysis.diff.mfu import gap_lines


def format_diff(d: DiffResult, top_k: int = 8) -> str:
    """Render the verdict change, new recommendations, the one-line summary, headline figures, causes, ops and ranks.

    Args:
        d: what ``compare`` (or ``diff_paths``) returned.
        top_k: how many ops to list in each of matched, added and removed.
    """
    lines = ["perf-callbacks diff", f"  base: {_side(d.base)}", f"  new:  {_side(d.new)}"]
    if d.base["ranks"] != d.new["ranks"]:
        lines.append(f"  note: the two sides hold different ranks (base {d.base['ranks']}, new {d.new['ranks']}): "
                     "figures compare different processes, and per-rank rows only the ranks on both sides")
    lines.append("")
    changed = d.verdict["base"] != d.verdict["new"]
    lines.append(f"verdict: {d.verdict['base']} -> {d.verdict['new']}" if changed else f"verdict: {d.verdict['new']} "
                 "(unchanged)")
    if d.recommendations.get("added"):
        lines += ["new recommendations:"] + [f"  {i}. {t}" for i, t in enumerate(d.recommendations["added"], 1)]
    lines += ["", d.summary, "  " + _noise(d)]
    lines += [memory] if (memory := changed_line(d.memory_categories)) else []
    lines += [""]
    lines += estimate_lines(d.estimates) + ([""] if d.estimates else [])
    lines += _headline(d) + [""] + _causes(d) + [""] + _ops(d, top_k) + _ranks(d)
    lines += [""] + gap_lines(d.mfu_gap) if d.mfu_gap else []
    measures = measure_diff_lines(d.measures)
    lines += [""] + measures if measures else []
    categories = category_diff_lines(d.memory_categories)
    lines += [""] + categories if categories else []
    return "\n".join(lines).rstrip() + "\n"


def _side(side: dict[str, Any]) -> str:
    window = side.get("window", side["path"])
    extra = "" if side.get("complete", True) else ", incomplete: no complete window found"
    where = window if window == side["path"] else f"{side['path']} -> {window}"
    return f"{where} ({side['n_steps']} steps{extra})"


def _noise(d: DiffResult) -> str:
    ranks = max(len(d.base["ranks"]), len(d.new["ranks"]))
    over = f"{d.base['n_steps']} and {d.new['n_steps']} steps" + (" of each rank" if ranks > 1 else "")
    return f"noise: {d.step_time_ms['noise']}, in ms over {over}"


def _headline(d: DiffResult) -> list[str]:
    st = d.step_time_ms
    pct = "" if st["change_pct"] is None else f" ({st['change_pct']:+.1f}%)"
    rows = [("step time (median)", _ms(st["base"]), _ms(st["new"]), f"{st['change']:+.2f} ms{pct}")]
    rows.append(("GPU utilization", *_fractions(d.gpu_utilization)))
    rows.append(("data wait", *_fractions(d.data_wait_fraction)))
    if d.mfu and (d.mfu["base"] is not None or d.mfu["new"] is not None):
        rows.append(("MFU", *_fractions(d.mfu)))
    mem = d.peak_memory_bytes
    if mem["base"] is not None or mem["new"] is not None:
        rows.append(("peak memory", _gb(mem["base"]), _gb(mem["new"]),
                     "n/a" if mem["change"] is None else f"{mem['change'] / 1e9:+.2f} GB"))
    out = [f"{'':20} {'base':>12} {'new':>12}   change"]
    return out + [f"{name:20} {a:>12} {b:>12}   {c}" for name, a, b, c in rows]


def _causes(d: DiffResult) -> list[str]:
    out = ["time by cause, ms per step (largest change first):"]
    for c in (x for x in d.contributors if x["kind"] == "cause"):
        v = d.causes[c["name"]]
        if v["base"] or v["new"]:
            out.append(f"  {c['name']:22} {v['base']:10.2f} -> {v['new']:10.2f}   {v['change']:+.2f}")
    return out


def _ops(d: DiffResult, top_k: int) -> list[str]:
    tagged = [(t, o) for t, key in (("", "matched"), (" (new)", "added"), (" (gone)", "removed")) for o in d.ops[key]]
    if not tagged:
        return []
    tagged.sort(key=lambda to: -abs(to[1]["change_ms"]))
    out = [f"ops by self {tagged[0][1]['device']} time, ms per step (largest change first):"]
    for tag, o in tagged[:top_k]:
        a, b = o["base"], o["new"]
        name = o["name"] if len(o["name"]) <= 50 - len(tag) else o["name"][: 47 - len(tag)] + "..."
        out.append(f"  {name + tag:50} {a['per_step_ms']:9.3f} -> {b['per_step_ms']:9.3f} {o['change_ms']:+9.3f}  "
                   f"calls {a['count']} -> {b['count']}, per call {a['per_call_ms']:.3f} -> {b['per_call_ms']:.3f}")
    counts = {k: len(v) for k, v in d.ops.items()}
    out.append(f"  ({counts['matched']} ops matched by name, {counts['added']} new, {counts['removed']} gone; "
               "--json lists all)")
    return out


def _ranks(d: DiffResult) -> list[str]:
    if len(d.ranks) < 2 and not d.stragglers.get("changed"):
        return []
    out = ["", "ranks (median step time):"]
    for r in d.ranks:
        judged = "significant" if r["significant"] else "within noise"
        verdict = r["verdict"]["new"] if r["verdict"]["base"] == r["verdict"]["new"] else \
            f"{r['verdict']['base']} -> {r['verdict']['new']}"
        out.append(f"  rank {r['rank']}: {r['base']:.1f} -> {r['new']:.1f} ms ({r['change']:+.1f}, {judged}), "
                   f"{verdict}")
    s = d.stragglers
    out.append(f"stragglers: {s['base'] or 'none'} -> {s['new'] or 'none'}" + (" (changed)" if s["changed"] else ""))
    return out


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f} ms"


def _gb(x: float | None) -> str:
    return "n/a" if x is None else f"{x / 1e9:.2f} GB"


def _fractions(v: dict[str, Any]) -> tuple[str, str, str]:
    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.1%}"

    change = "n/a" if v["change"] is None else f"{v['change'] * 100:+.1f} pts"
    return pct(v["base"]), pct(v["new"]), change
