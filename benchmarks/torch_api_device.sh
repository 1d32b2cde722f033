#!/usr/bin/env bash
# tl_attention on the lent GPU machine in one call: compile the kernels, benchmarks/model_step.py, then
# tests/gpu/test_torch_api_gpu.py; logs and the benchmark's JSON land in $OUT.
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
# Compile every kernel first, in parallel (the benchmark's is one of the tests' models'), and their derived
# backward kernels into the same disk cache, so no test or timed step compiles one after another.
timeout --kill-after=5 "${TL_WARM_S:-200}" python3 -c "
import sys, time; sys.path.insert(0, 'tests/gpu')
import tl_attention, test_torch_api_gpu as t
from pipeline.backward import backward_provider, _BUILDS
from runner.compile import CompileJob, compile_many
from runner.launch import require_device
start = time.perf_counter(); ks = t.suite_kernels(); tl_attention.load_many(ks)
print(f'{len(ks)} kernels compiled and loaded in {time.perf_counter() - start:.1f} s')
for k in ks: backward_provider(k)
dev = require_device()
jobs = [CompileJob(source=b.source, arch=b.spec.arch, name=b.cu_path.name if b.cu_path else f'{b.spec.name}.bwd.cu', device_arch=dev) for b in _BUILDS.values()]
out = compile_many(jobs)
print(f'{len(jobs)} backward sources compiled in {time.perf_counter() - start:.1f} s: {[type(o).__name__ for o in out]}')
" 2>&1 | tee "$OUT/warm.log"
timeout --kill-after=5 "${TL_BENCH_S:-70}" python3 benchmarks/model_step.py --out "$OUT/model_step.json" "$@" \
    2>&1 | tee "$OUT/model_step.log" | tail -n 25
timeout --kill-after=5 "${TL_TESTS_S:-200}" python3 -m pytest tests/gpu/test_torch_api_gpu.py -m gpu \
    -p no:cacheprovider -rfE -s -q -p no:logging 2>&1 | grep -v "^DEBUG " | tee "$OUT/torch_api_tests.log" | tail -n 40
