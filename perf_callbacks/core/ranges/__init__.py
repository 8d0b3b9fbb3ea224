"""Ranges other tools read: NVTX for training steps, phases and modules, and the Nsight Systems capture window."""
