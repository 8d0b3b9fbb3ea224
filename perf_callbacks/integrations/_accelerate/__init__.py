"""The Accelerate adapter's private parts: step counting, phases, loader checks, the count in checkpoints, metrics."""
