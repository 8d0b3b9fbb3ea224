#!/usr/bin/env bash
# Download the wheels that the lent GPU machine's image lacks (cp312, manylinux x86_64) into .whl/, for
# `benchmarks/gpu.sh` there. The image has torch, lightning, accelerate, transformers, tensorboard, pytest and
# nvidia-ml-py; it lacks nvtx, orjson and jsonargparse (imported by the CLI tests at collection).
#
#   bash tools/device_wheels.sh          # then carry .whl (ignored by git through .git/info/exclude)
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
    -d .whl nvtx==0.2.17 orjson==3.13.0 jsonargparse==4.53.0 docstring-parser==0.18.0 typeshed-client==2.15.0
ls -l .whl
