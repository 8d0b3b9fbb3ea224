"""The Lightning adapter's private parts: the training loaders' checks and the Trainer methods it wraps."""
