"""The engine of one run on one rank and its parts: step state, phase ranges, time set aside, intervals, files."""
