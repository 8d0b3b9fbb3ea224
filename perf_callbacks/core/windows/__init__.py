"""Profiling windows: the recorder, the profiler session, the trace cut, the background analysis and the summary."""
