"""The HTML report: one self-contained page per window, per run and per comparison, and their charts."""
