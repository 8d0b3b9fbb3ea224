#!/usr/bin/env bash
# Overhead benchmark and GPU tests on a CUDA machine, in under 5 minutes (benchmark ~2 min, tests ~1 min); the
# time limits below add up to 9 minutes, inside the lent GPU machine's 10-minute call.
#
#   bash benchmarks/gpu.sh                 # results in ./benchmark-results
#   OUT=/some/dir bash benchmarks/gpu.sh   # results in $OUT
#
# On the lent GPU machine (its image lacks nvtx, orjson and jsonargparse): run `bash tools/device_wheels.sh` here,
# then, carrying `.whl`, `bash benchmarks/gpu.sh` there: with a `.whl/` folder present it installs those wheels
# into /tmp/site and the project with `pip install --no-deps --no-build-isolation --no-index -e .` first.
#
# Writes environment.txt, overhead-cuda.json, overhead-cuda.txt (the table with PASS/MISS), memory-history.json (the
# cost of memory_history and of per-phase peak reads) and pytest-gpu.txt. Exits
# non-zero when the benchmark crashes or a GPU test fails; a MISS in the table is reported, not failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-$(command -v python3 || command -v python)}"
DEST="${OUT:-benchmark-results}"
mkdir -p "$DEST"

if [ -d .whl ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" \
    && "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e . \
    || { echo "gpu.sh: installing .whl/ and the project failed" >&2; exit 1; }
fi

"$PY" - <<'PYEOF' 2>&1 | tee "$DEST/environment.txt"
import platform, torch, lightning
assert torch.cuda.is_available(), "benchmarks/gpu.sh needs a CUDA device"
print(torch.cuda.get_device_name(), "| torch", torch.__version__, "| CUDA", torch.version.cuda,
      "| lightning", lightning.__version__, "| python", platform.python_version())
PYEOF
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1

timeout 200 "$PY" benchmarks/overhead.py --device cuda --out "$DEST/overhead-cuda.json" 2>"$DEST/overhead-cuda.stderr" \
    | tee "$DEST/overhead-cuda.txt"
bench=${PIPESTATUS[0]}

timeout 90 "$PY" benchmarks/memory_history.py --out "$DEST/memory-history.json" 2>&1 | tee "$DEST/memory-history.txt"
history=${PIPESTATUS[0]}

timeout 240 "$PY" -m pytest -m gpu -q -rs -p no:cacheprovider 2>&1 | tee "$DEST/pytest-gpu.txt"
tests=${PIPESTATUS[0]}

echo "benchmark exit ${bench}, memory_history benchmark exit ${history}, gpu tests exit ${tests}; results in ${DEST}"
[ "$bench" -eq 0 ] && [ "$history" -eq 0 ] && [ "$tests" -eq 0 ]
