"""The run's files: the output guard, trace layout and export, object storage, and detached child processes."""
