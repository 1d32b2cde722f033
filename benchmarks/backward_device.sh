#!/usr/bin/env bash
# One device call: build the backward cubins on the H200 (16 cores), verify them against autograd of the
# IR reference on odd shapes, time the plain backward (and its deterministic build) against SDPA flash /
# cuDNN (bf16, d 128, 8k), and profile the plain dQ/dK/dV kernel once with Nsight Compute.
#   run(command="bash benchmarks/backward_device.sh", carry=[".whl"], timeout_s=300)
# It builds on the device: the VM's NVRTC (13.5) writes PTX 9.5, which the H200's driver (580, CUDA 13.0)
# cannot JIT, so modules built here do not travel.
# ONLY selects the cases (regex over stem_dtype_dN[_det]; default all), BENCH="--dims 64,128 --seqlens
# 4096,8192,16384" the sweep, PROFILE=0 skips Nsight Compute, NVCC=1 builds with the device's nvcc
# (sm_90 cubins, about twice as fast as NVRTC + ptxas) instead of the product's NVRTC path.
set -u
python3 -m pip install -q --no-deps --no-index --target /tmp/site .whl/nvidia_cutlass-4.2.0.0-py3-none-any.whl
export PYTHONPATH=$PWD:/tmp/site TL_CACHE_DIR=/tmp/tlcache PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bwd-out}
mkdir -p "$OUT"
ONLY=${ONLY:-'.'}
BENCH=${BENCH:-"--dims 128 --seqlens 8192"}
PROFILE=${PROFILE:-1}
SECONDS=0
python3 benchmarks/backward.py --build-forwards .cache/bwd2 > "$OUT/fwd_build.log" 2>&1 &
FWD=$!
NVCC_FLAG=""
[ "${NVCC:-0}" = 1 ] && NVCC_FLAG="--nvcc"
# shellcheck disable=SC2086
python3 benchmarks/backward_verify.py --build .cache/bwd2 --only "$ONLY" $NVCC_FLAG > "$OUT/build.log" 2>&1
grep -i "fail\|error" "$OUT/build.log" | head -5
tail -1 "$OUT/build.log"
echo "built at ${SECONDS}s"
python3 benchmarks/backward_verify.py --run .cache/bwd2 > "$OUT/verify.log" 2>&1
grep -v ": ok" "$OUT/verify.log" | tail -40
echo "verified at ${SECONDS}s"
wait $FWD
tail -2 "$OUT/fwd_build.log"
# shellcheck disable=SC2086
python3 benchmarks/backward.py --prebuilt .cache/bwd2 $BENCH --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
echo "benchmarked at ${SECONDS}s"
if [ "$PROFILE" = 1 ] && command -v ncu > /dev/null; then
  for tag in mha_fwd_bf16_d128 alibi_bf16_d128; do
    cuobjdump -res-usage ".cache/bwd2/$tag.cubin" 2>&1 | grep -A1 "dq_dk_dv" | tail -1 | sed "s/^/$tag sm_90: /"
  done
  timeout 60 ncu -k regex:dq_dk_dv --launch-skip 1 -c 1 --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section InstructionStats python3 benchmarks/backward_profile.py --prebuilt .cache/bwd2 \
    > "$OUT/ncu.log" 2>&1
  grep -E "Duration|Throughput|Registers|Stall|Issued|Warp Cycles|Achieved Occupancy|L2 Hit|Pipe|==ERR|==WARN" \
    "$OUT/ncu.log" | head -40
  echo "profiled at ${SECONDS}s"
fi
tail -8 "$OUT/bench.log"
