"""One rank's result: computed from its trace, or read back from a sidecar that still matches it."""
