#!/bin/sh
# Issue 19's H200 sweep in one device call (under TL_INFERENCE_BUDGET_S seconds, default 290; logs and
# JSON under $OUT):
#   run (carry [".whl"], timeout 300):
#     python3 -m pip install -q --no-deps --no-index --target /tmp/site .whl/nvidia_cutlass-4.2.0.0-py3-none-any.whl
#     && export PYTHONPATH=$PWD:/tmp/site TL_CACHE_DIR=/tmp/tlcache PYTHONUNBUFFERED=1; sh benchmarks/inference_on_device.sh
# 1. the three inference examples verified against their IR reference (VERIFY_TARGETS, default sm_80,sm_90);
# 2. decode K+V bandwidth, every candidate as a CUDA graph replay (GPU time): TL paged / contiguous and
#    their A/B builds (DECODE_AB, `--ab` values separated by spaces) and split factors vs cuDNN, SDPA FA2,
#    FA4 (contiguous and page_table) when it imports;
# 3. the decode step's two kernels timed apart (benchmarks/decode_phases.py: step, attention kernel,
#    combine) and B 1 x 128k again with eager launches (the host overhead each library's Python call adds);
# 4. varlen prefill vs the padded batch and FlexAttention's document mask;
# 5. FlexAttention's decode (torch.compile per shape), when time is left.
# FA4: TL_FA4_SITE (or benchmarks/fa4_install.sh's /tmp/tl-fa4/site) is read through a sitecustomize,
# since flash-attn-4's DSL registers its packages with a .pth file. Each step has its own time limit
# within the budget, so a slow one leaves the others their results.
set -u
START=$(date +%s)
BUDGET=${TL_INFERENCE_BUDGET_S:-290}
VERIFY_TARGETS=${VERIFY_TARGETS:-sm_80,sm_90}
DECODE_AB=${DECODE_AB:-BN=32}
SPLIT_FACTORS=${SPLIT_FACTORS:-0.5,2}
FA4_SITE=${TL_FA4_SITE:-/tmp/tl-fa4/site}
if [ -n "${TL_FA4_SITE:-}" ] || [ -f "$FA4_SITE/.tl-fa4-installed" ]; then
    mkdir -p /tmp/tl-inference-site
    printf 'import site\nsite.addsitedir(%s)\n' "'$FA4_SITE'" >/tmp/tl-inference-site/sitecustomize.py
    export PYTHONPATH="/tmp/tl-inference-site:${PYTHONPATH:-}"
    echo "FA4 site: $FA4_SITE"
fi
step() {  # name limit command...: runs when at least 20 s are left, within min(limit, what is left)
    name=$1; limit=$2; shift 2
    left=$((BUDGET - ($(date +%s) - START) - 5))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 20 ]; then echo "$name skipped: ${left}s left"; return; fi
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    echo "$name rc $? ($(($(date +%s) - START)) s)"
}
table() {  # a decode log's table, or the rows of the shapes it finished before its time limit
    [ -f "$OUT/$1.log" ] || return
    if grep -q '^Decode,' "$OUT/$1.log"; then sed -n '/^Decode,/,$p' "$OUT/$1.log"; else grep '^  B[0-9]' "$OUT/$1.log"; fi
}
AB=""
for ab in $DECODE_AB; do AB="$AB --ab $ab"; done
step verify 70 python3 benchmarks/verify_decode.py --only paged_decode,spec_decode,varlen_prefill \
    --targets "$VERIFY_TARGETS" --dtypes bf16 --json "$OUT/verify.json"
grep -v '^ ' "$OUT/verify.log" | tail -8
# shellcheck disable=SC2086  # $AB is a list of arguments
step decode 110 python3 benchmarks/decode.py $AB --split-factors "$SPLIT_FACTORS" --target-s 0.25 \
    --json "$OUT/decode.json"
table decode; grep -E '^  [a-z]|FAIL|fa4' "$OUT/decode.log" | head -12
step phases 60 python3 benchmarks/decode_phases.py --splits 22,90 --target-s 0.3 --json "$OUT/phases.json"
sed -n '/^Decode phases/,$p' "$OUT/phases.log"
step decode_eager 40 python3 benchmarks/decode.py --launch eager --shapes 1x131072 --target-s 0.25 \
    --candidates tl-paged,tl-contig,cudnn,sdpa-fa2,fa4,fa4-paged --json "$OUT/decode_eager.json"
table decode_eager
step varlen 55 python3 benchmarks/varlen.py --flex --target-s 0.5 --json "$OUT/varlen.json"
tail -6 "$OUT/varlen.log"
step decode_flex 60 python3 benchmarks/decode.py --flex --no-fa4 --candidates flex,cudnn,tl-paged \
    --target-s 0.2 --json "$OUT/decode_flex.json"
table decode_flex
