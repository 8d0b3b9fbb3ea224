"""The engine of one run on one rank: its step, the time it sets aside, its files and its captured windows."""
