"""Step timing: interval metrics, the CPU wait, the data loader checks and the workers' load."""
