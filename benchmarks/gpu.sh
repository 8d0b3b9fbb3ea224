#!/usr/bin/env bash
# Overhead benchmark and GPU tests on a CUDA machine, in under 5 minutes (benchmark ~2 min, tests ~1 min).
#
#   bash benchmarks/gpu.sh                 # results in ./benchmark-results
#   OUT=/some/dir bash benchmarks/gpu.sh   # results in $OUT
#
# Writes environment.txt, overhead-cuda.json, overhead-cuda.txt (the table with PASS/MISS), memory-history.json (the
# cost of memory_history and of per-phase peak reads) and pytest-gpu.txt. Exits
# non-zero when the benchmark crashes or a GPU test fails; a MISS in the table is reported, not failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
DEST="${OUT:-benchmark-results}"
mkdir -p "$DEST"

"$PY" - <<'PYEOF' 2>&1 | tee "$DEST/environment.txt"
import platform, torch, lightning
assert torch.cuda.is_available(), "benchmarks/gpu.sh needs a CUDA device"
print(torch.cuda.get_device_name(), "| torch", torch.__version__, "| CUDA", torch.version.cuda,
      "| lightning", lightning.__version__, "| python", platform.python_version())
PYEOF
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1

timeout 240 "$PY" benchmarks/overhead.py --device cuda --out "$DEST/overhead-cuda.json" 2>"$DEST/overhead-cuda.stderr" \
    | tee "$DEST/overhead-cuda.txt"
bench=${PIPESTATUS[0]}

timeout 120 "$PY" benchmarks/memory_history.py --out "$DEST/memory-history.json" 2>&1 | tee "$DEST/memory-history.txt"
history=${PIPESTATUS[0]}

timeout 300 "$PY" -m pytest -m gpu -q -rs -p no:cacheprovider 2>&1 | tee "$DEST/pytest-gpu.txt"
tests=${PIPESTATUS[0]}

echo "benchmark exit ${bench}, memory_history benchmark exit ${history}, gpu tests exit ${tests}; results in ${DEST}"
[ "$bench" -eq 0 ] && [ "$history" -eq 0 ] && [ "$tests" -eq 0 ]
