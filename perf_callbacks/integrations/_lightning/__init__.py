"""The Lightning adapter's private parts: the training loaders' checks, the Trainer methods it wraps, its loggers."""
