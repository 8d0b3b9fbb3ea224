"""``compare``: what changed between two windows, beyond the noise, by cause, and against the estimates."""
