"""When a window opens: the profiling schedule, and captures off it (anomalous steps, the slowdown alarm, requests)."""
