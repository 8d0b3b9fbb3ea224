"""Memory in a window: by operator and over time, what the peak is made of, and what grows."""
