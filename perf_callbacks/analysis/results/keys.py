"""The keys of the results' JSON objects, in their order (``report --json``, the sidecars' ``rank``).

The results hold parts (``results.parts``) whose keys sit among their own fields' in these objects, as they did when
every figure was a field of its own: ``to_dict`` writes the keys in this order, so the JSON stays the same.
"""

from __future__ import annotations

RANK_KEYS = (
    "rank", "path", "span_ms", "gpu_utilization", "kernel_busy_fraction", "step_time_ms", "data_wait_fraction",
    "losses", "copies_ms", "comm_ms", "top_ops", "peak_memory_bytes", "device_memory_bytes", "profiler_flags",
    "data_loader", "collectives_ms", "sync_calls_ms", "launches_per_step", "verdict", "recommendations", "rank_source",
    "run_id", "start_us", "end_us", "device_kind", "window_definition", "backlog_fraction", "graph_idle_fraction",
    "copy_exposed_ms", "collectives_by_op_ms", "devices", "communication", "overlap_fraction", "copies", "launch",
    "memory_by_op", "memory_peak", "memory_curve", "memory_categories", "memory_at_peak", "memory_growth", "op_table",
    "measure_notes", "bad_events", "runtime_calls", "host_traced", "set_aside_ms", "flops", "collective_steps",
    "machine", "cuda_on_host", "prologue_ms", "epilogue_ms", "strip", "strip_names", "load", "loader", "roofline",
    "roofline_peaks", "precision", "modules", "arrivals", "steps",
)
"""A ``RankResult``'s keys; ``steps`` last."""

WINDOW_KEYS = (
    "path", "verdict", "gpu_utilization", "data_wait_fraction", "step_time_ms", "top_ops", "peak_memory_bytes",
    "recommendations", "stragglers", "imbalance_ratio", "step_time_spread_ms", "straggler_reasons", "windows",
    "verdict_margin", "runner_up", "verdict_note", "devices", "notes", "errors", "partial", "captures", "device",
    "flops_per_step", "achieved_tflops", "peak_tflops", "mfu", "mfu_gap", "flops_source", "peak_source",
    "communication", "overlap_fraction", "copies", "launch", "memory_by_op", "memory_peak", "memory_categories",
    "memory_at_peak", "memory_growth", "op_table", "loader", "hang", "roofline", "roofline_peaks", "precision",
    "modules", "culprit", "merged_trace", "ranks",
)
"""An ``AnalysisResult``'s keys (its ``others`` are not in the JSON); ``ranks`` last."""
