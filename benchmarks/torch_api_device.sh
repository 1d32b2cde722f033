#!/usr/bin/env bash
# tl_attention on the lent GPU machine in one call: tests/gpu/test_torch_api_gpu.py, then
# benchmarks/model_step.py; logs and the benchmark's JSON land in $OUT.
#
#   bash benchmarks/torch_api_device.sh [extra args for benchmarks/model_step.py]
#
# Carry .whl (the nvidia-cutlass wheel: the CuTe headers; pytest, pluggy, iniconfig for images without
# pytest). Compiled kernels go to $TL_CACHE_DIR (default /tmp/tlcache): the benchmark reuses the tests'.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT="${OUT:-$PWD/.device-out}"
mkdir -p "$OUT"
SITE=/tmp/tl-site
python3 -m pip install -q --no-deps --no-index --target "$SITE" .whl/nvidia_cutlass-4.2.0.0-py3-none-any.whl
if ! python3 -c "import pytest" >/dev/null 2>&1; then
    python3 -m pip install -q --no-deps --no-index --target "$SITE" .whl/pytest-*.whl .whl/pluggy-*.whl \
        .whl/iniconfig-*.whl
fi
export PYTHONPATH="$PWD:$SITE" TL_CACHE_DIR="${TL_CACHE_DIR:-/tmp/tlcache}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout --kill-after=5 "${TL_TESTS_S:-110}" python3 -m pytest tests/gpu/test_torch_api_gpu.py -m gpu \
    -p no:cacheprovider -rfE -s -q 2>&1 | tee "$OUT/torch_api_tests.log" | tail -n 40
timeout --kill-after=5 "${TL_BENCH_S:-60}" python3 benchmarks/model_step.py --out "$OUT/model_step.json" "$@" \
    2>&1 | tee "$OUT/model_step.log" | tail -n 25
