"""Compute: MFU, the roofline, the precision hint and time and FLOPs by module."""
