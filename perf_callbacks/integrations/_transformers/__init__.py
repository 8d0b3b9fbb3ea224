"""The transformers adapter's private parts: the Trainer methods it wraps and the metrics through ``report_to``."""
