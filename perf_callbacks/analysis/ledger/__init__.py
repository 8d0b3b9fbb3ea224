"""The ledger: every second of a rank's wall time, by part (``parts.py``), its advice (``advice.py``) and text."""
