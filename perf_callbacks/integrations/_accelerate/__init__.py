"""The Accelerate adapter's private parts: step counting, the step count in checkpoints, cross-rank metrics."""
