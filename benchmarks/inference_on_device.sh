#!/bin/sh
# Issue 19's H200 sweep in one device call (about 4.5 minutes; logs and JSON under $OUT):
#   run: python3 -m pip install -q --no-deps --no-index --target /tmp/site .whl/nvidia_cutlass-4.2.0.0-py3-none-any.whl
#        && export PYTHONPATH=$PWD:/tmp/site TL_CACHE_DIR=/tmp/tlcache PYTHONUNBUFFERED=1; sh benchmarks/inference_on_device.sh
# 1. the three inference examples verified on both targets (the struct-argument launch included);
# 2. decode K+V bandwidth, TL paged / contiguous (and BN 32) vs cuDNN and SDPA FA2;
# 3. FlexAttention's decode beside cuDNN (separate: torch.compile per shape);
# 4. varlen prefill vs the padded batch and FlexAttention's document mask.
# Each step has its own time limit, so a slow one leaves the others their results.
set -u
step() { name=$1; limit=$2; shift 2; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "$name rc $?"; }
step verify 75 python3 benchmarks/verify_decode.py --only paged_decode,spec_decode,varlen_prefill \
    --targets sm_80,sm_90 --dtypes bf16 --json "$OUT/verify.json"
grep -v '^ ' "$OUT/verify.log" | tail -8
step decode 80 python3 benchmarks/decode.py --ab BN=32 --target-s 0.4 --json "$OUT/decode.json"
tail -16 "$OUT/decode.log"
step decode_flex 60 python3 benchmarks/decode.py --flex --candidates flex,cudnn --target-s 0.3 \
    --json "$OUT/decode_flex.json"
tail -8 "$OUT/decode_flex.log"
step varlen 60 python3 benchmarks/varlen.py --flex --target-s 0.5 --json "$OUT/varlen.json"
tail -7 "$OUT/varlen.log"
