"""Memory: interval samples, per-phase peaks, what the peak is made of, what grows, and out-of-memory forensics."""
