"""``python -m perf_callbacks.cli``: the ``perf-callbacks`` command."""

import sys

from perf_callbacks.cli.main import main

if __name__ == "__main__":  # not when a tool imports every module (the doctest collection does)
    sys.exit(main())
