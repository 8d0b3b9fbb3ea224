"""Windows: analysing one (``analyze``), the ranks and windows a folder holds, captured windows and hangs."""
