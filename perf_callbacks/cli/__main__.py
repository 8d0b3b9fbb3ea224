"""``python -m perf_callbacks.cli``: the ``perf-callbacks`` command."""

import sys

from perf_callbacks.cli.main import main

sys.exit(main())
