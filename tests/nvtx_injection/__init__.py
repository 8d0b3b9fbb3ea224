"""An NVTX injection library (``inject.c``) and helpers that run Python under it and parse what it recorded.

See :mod:`tests.nvtx_injection.harness`.
"""
