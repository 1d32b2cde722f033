#!/usr/bin/env bash
# One device call: build the backward cubins on the H200 (16 cores), verify them against autograd of the
# IR reference on odd shapes, then time the plain backward against SDPA flash / cuDNN (bf16, d 128, 8k).
#   run(command="bash benchmarks/backward_device.sh", carry=[".whl"], timeout_s=200)
# It builds on the device: the VM's NVRTC (13.5) writes PTX 9.5, which the H200's driver (580, CUDA 13.0)
# cannot JIT, so modules built here do not travel.
# ONLY selects the cases (regex over stem_dtype_dN), BENCH="--dims 64,128 --seqlens 4096,8192,16384" the sweep.
set -u
python3 -m pip install -q --no-deps --no-index --target /tmp/site .whl/nvidia_cutlass-4.2.0.0-py3-none-any.whl
export PYTHONPATH=$PWD:/tmp/site TL_CACHE_DIR=/tmp/tlcache PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bwd-out}
mkdir -p "$OUT"
ONLY=${ONLY:-'mha_fwd_bf16|alibi|softcap_fp16_d128|sigmoid|learnable_sink'}
BENCH=${BENCH:-"--dims 128 --seqlens 8192"}
python3 benchmarks/backward.py --build-forwards .cache/bwd2 > "$OUT/fwd_build.log" 2>&1 &
FWD=$!
python3 benchmarks/backward_verify.py --build .cache/bwd2 --only "$ONLY" > "$OUT/build.log" 2>&1
tail -12 "$OUT/build.log"
python3 benchmarks/backward_verify.py --run .cache/bwd2 > "$OUT/verify.log" 2>&1
grep -v ": ok" "$OUT/verify.log" | tail -40
grep -c ": ok" "$OUT/verify.log"
wait $FWD
tail -4 "$OUT/fwd_build.log"
# shellcheck disable=SC2086
python3 benchmarks/backward.py --prebuilt .cache/bwd2 $BENCH --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
tail -16 "$OUT/bench.log"
