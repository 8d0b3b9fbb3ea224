"""The adapters: thin layers that turn Lightning, Accelerate and transformers hooks into the engine's verbs.

``lightning``, ``accelerate`` and ``transformers`` hold the public classes; ``_accelerate``, ``_lightning`` and
``_transformers`` their private parts; ``_adapters``, ``_events`` and ``_cli_errors`` what they share.
"""
