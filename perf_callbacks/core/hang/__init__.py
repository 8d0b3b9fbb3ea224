"""Hang forensics: the watchdog thread and the evidence it writes."""
