#!/usr/bin/env bash
# One short device call over backward cubins built beforehand (here: `backward_verify.py --build DIR --nvcc`,
# the toolkit's nvcc 13.0 matching the H200's driver): verify every build in DIR against autograd of the IR
# reference on the odd shapes, then time the plain and causal backward at 8k (d 128, bf16) beside the
# other builds whose tags end in ALSO (e.g. _det: the deterministic dQ; _prev: an earlier kernel) and SDPA
# flash / cuDNN, same process, balanced order. No compile runs on the device.
#   run(command="bash benchmarks/backward_device_prebuilt.sh", carry=[".whl", ".cache/bwd_call2"], timeout_s=90)
set -u
python3 -m pip install -q --no-deps --no-index --target /tmp/site .whl/nvidia_cutlass-4.2.0.0-py3-none-any.whl
export PYTHONPATH=$PWD:/tmp/site TL_CACHE_DIR=/tmp/tlcache PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bwd-out}
DIR=${DIR:-.cache/bwd_call2}
ALSO=${ALSO:-_det,_fast,_prev}
mkdir -p "$OUT"
SECONDS=0
python3 benchmarks/backward_verify.py --run "$DIR" > "$OUT/verify.log" 2>&1
grep -v ": ok" "$OUT/verify.log" | tail -12
echo "verified at ${SECONDS}s"
python3 benchmarks/backward.py --prebuilt "$DIR" --dims 128 --seqlens 8192 --target-s 1.0 --also "$ALSO" \
  --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
echo "benchmarked at ${SECONDS}s"
tail -7 "$OUT/bench.log"
