"""Profiling windows: the recorder, session, trace metadata, window-end hand-off, trace cut, background job, summary."""
