"""FLOPs: the count per step and per module, the device's peak FLOP/s, and torch.compile's health."""
