#!/usr/bin/env bash
# One device call for the sm_90 backward (translator/backends/sm90_bwd.py: dQ/dK/dV on wgmma, an sm_90a
# cubin) for the plain kernels and the catalogue (bf16 and fp16, d 128; d 64 for the plain ones), with the
# default sm_80 skeleton of the plain kernels beside it: run one smoke case under a timeout (a hang stops
# the script there), verify every case in DIR against autograd of the IR reference on odd shapes (lengths
# 1, 17, 1000, 4097; seqlen_q ≠ seqlen_k; GQA 2 and 7), then time the builds ALSO names beside the sm_80
# skeleton, SDPA flash / cuDNN and FA4 (bf16, 16 heads, 16k tokens) and print the table.
#   run(command="bash benchmarks/backward_sm90_device.sh", carry=[".whl", ".cache/bwd90"], timeout_s=600)
# The cubins come prebuilt in DIR (on the VM: `bash benchmarks/backward_sm90_device.sh build`, the
# toolkit's nvcc 13.0, which matches the H200's driver; NVRTC's output here may not load there); the build
# step on the device only checks they are up to date and rebuilds a stale one with the device's nvcc.
# NVRTC=1 builds with the product's NVRTC path on the device instead. ONLY selects the sm_90 cases (regex
# over stem_dtype_dN, default all), BENCH the timing sweep; AB the A/B builds, space-separated
# `skeleton=regex` pairs (`backward_verify.py --skeleton`, generator options, and the cases it builds):
# sm90ovl (overlap_p: P while dP's wgmma runs), sm90km (key-major grid), sm90dqb (dq_bulk: dQ by one
# bulk reduce-add a block, d 128's default), sm90atom (dQ by atomics, d 64's default), sm90ovlq (overlap_p
# and dq_bulk), sm90m80 (80-row query tiles, dQ swapped), sm90m80q (that and dq_bulk), sm90m128 (128-row
# query tiles, d 64). Another build can be timed by copying its cubin and json into DIR under a new
# suffix and naming it in ALSO. The steps run under their own timeouts
# (smoke 90 s, verification 330 s, timing BENCH_S, default 150 s) so the table still prints inside a 600 s call.
# FA4: carry .fa4/part1 in one call (it is staged outside the checkout) and .fa4/part2 in the next, sent
# at once while the machine is warm (benchmarks/fa4_wheels.sh lays them out; fa4_install.sh installs into
# /tmp/tl-fa4/site), or point TL_FA4_SITE at a folder with flash-attn-4 in it: only the timing step reads
# it, through a sitecustomize (the DSL registers its packages with a .pth file, which PYTHONPATH alone does
# not read), and benchmarks/backward.py times FA4 once its gradients agree with SDPA flash's.
set -u
DIR=${DIR:-.cache/bwd90}
ONLY=${ONLY:-'.'}
AB=${AB:-'sm90ovl=^((causal_)?mha_fwd_bf16_d(128|64)|(alibi|sliding_window|relative_bias)_bf16_d128)$'}
# the builds timed beside the sm_80 skeleton (prebuilt tags `<case><suffix>` that exist; others are
# skipped): the default and AB's
ALSO=${ALSO:-_sm90$(for pair in $AB; do printf ',_%s' "${pair%%=*}"; done)}
BENCH=${BENCH:-"--dims 128 --seqlens 8192"}
NVCC_FLAG="--nvcc"
[ "${NVRTC:-0}" = 1 ] && NVCC_FLAG=""
if [ "${1:-}" = build ]; then  # on the VM, before the call: the cubins the call carries
  export PYTHONPATH=$PWD
  python3 benchmarks/backward_verify.py --build "$DIR" --only '^(causal_)?mha_fwd_bf16_d128$' --nvcc
  python3 benchmarks/backward_verify.py --build "$DIR" --skeleton sm90 --only "$ONLY" --nvcc
  for pair in $AB; do
    python3 benchmarks/backward_verify.py --build "$DIR" --skeleton "${pair%%=*}" --only "${pair#*=}" --nvcc
  done
  du -sh "$DIR"
  exit 0
fi
python3 -m pip install -q --no-deps --no-index --target /tmp/site .whl/nvidia_cutlass-4.2.0.0-py3-none-any.whl
export PYTHONPATH=$PWD:/tmp/site TL_CACHE_DIR=/tmp/tlcache PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bwd90-out}
mkdir -p "$OUT"
# FA4: a carried .fa4/part1 is staged (call 1, FA4 stays off in it), .fa4/part2 installs (call 2)
[ -d .fa4 ] && timeout 300 bash benchmarks/fa4_install.sh 2>&1 | tail -n 2
FA4_SITE=${TL_FA4_SITE:-/tmp/tl-fa4/site}
FA4_PATH=""
if [ -d "$FA4_SITE" ]; then
  mkdir -p /tmp/tl-bwd90-site
  printf 'import site\nsite.addsitedir(%s)\n' "'$FA4_SITE'" > /tmp/tl-bwd90-site/sitecustomize.py
  FA4_PATH=/tmp/tl-bwd90-site:
  echo "FA4 site: $FA4_SITE"
fi
SECONDS=0
# shellcheck disable=SC2086
python3 benchmarks/backward_verify.py --build "$DIR" --only '^(causal_)?mha_fwd_bf16_d128$' $NVCC_FLAG \
  > "$OUT/build_sm80.log" 2>&1 &
SM80=$!
# shellcheck disable=SC2086
python3 benchmarks/backward_verify.py --build "$DIR" --skeleton sm90 --only "$ONLY" $NVCC_FLAG \
  > "$OUT/build_sm90.log" 2>&1
for pair in $AB; do
  # shellcheck disable=SC2086
  python3 benchmarks/backward_verify.py --build "$DIR" --skeleton "${pair%%=*}" --only "${pair#*=}" $NVCC_FLAG \
    > "$OUT/build_${pair%%=*}.log" 2>&1
done
wait $SM80
grep -i "fail\|error" "$OUT"/build_sm*.log | head -5
tail -qn1 "$OUT"/build_sm*.log
echo "built at ${SECONDS}s"
if command -v cuobjdump > /dev/null; then
  for tag in mha_fwd_bf16_d128_sm90 causal_mha_fwd_bf16_d128_sm90 softcap_bf16_d128_sm90 alibi_bf16_d128_sm90 \
    mha_fwd_bf16_d128_sm90ovl causal_mha_fwd_bf16_d128_sm90ovl alibi_bf16_d128_sm90ovl mha_fwd_bf16_d128_sm90m80; do
    [ -f "$DIR/$tag.cubin" ] || continue
    cuobjdump -res-usage "$DIR/$tag.cubin" 2>&1 | grep -A1 "dq_dk_dv" | tail -1 | sed "s/^/$tag: /"
  done
fi

# smoke: the plain kernel (and its overlap_p variant) at one shape; 124 = one hung
mkdir -p "$DIR/smoke"
for tag in mha_fwd_bf16_d128_sm90 mha_fwd_bf16_d128_sm90ovl mha_fwd_bf16_d128_sm90m80 sliding_window_bf16_d128_sm90 \
  document_mask_bf16_d128_sm90; do
  [ -f "$DIR/$tag.cubin" ] && cp "$DIR/$tag.json" "$DIR/$tag.cubin" "$DIR/smoke/"
done
timeout 90 python3 benchmarks/backward_verify.py --run "$DIR/smoke" --shapes "2,4,2,1000,1000" > "$OUT/smoke.log" 2>&1
rc=$?
tail -n3 "$OUT/smoke.log"
if [ $rc = 124 ]; then
  echo "smoke: an sm_90 kernel HUNG (killed after 90 s; smoke.log says which); nothing else runs"
  exit 1
fi
echo "smoke rc=$rc at ${SECONDS}s"

timeout 330 python3 benchmarks/backward_verify.py --run "$DIR" > "$OUT/verify.log" 2>&1
echo "verify rc=$? at ${SECONDS}s"
grep -v ": ok" "$OUT/verify.log" | tail -40
for t in ${ALSO//,/ }; do
  ok=$(grep -c "${t}: .*: ok " "$OUT/verify.log"); bad=$(grep "${t}: " "$OUT/verify.log" | grep -vc ": ok ")
  [ "$ok$bad" != 00 ] && echo "$t verified ok: $ok, not ok: $bad"
done

# shellcheck disable=SC2086
PYTHONPATH="$FA4_PATH$PYTHONPATH" timeout "${BENCH_S:-150}" python3 benchmarks/backward.py --prebuilt "$DIR" $BENCH \
  --also "$ALSO" --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
echo "benchmarked at ${SECONDS}s"
grep "^ *fa4" "$OUT/bench.log" | head -8
tail -n6 "$OUT/bench.log"
python3 - "$OUT/bench.json" <<'EOF'
import json, re, sys

try:
    rows = json.load(open(sys.argv[1]))["rows"]
except (OSError, ValueError, KeyError):
    sys.exit("no bench.json")
rows = [r for r in rows if r["pass"] == "bwd"]
names = [k for k in rows[0] if re.fullmatch(r"tl_\w+", k) and not k.endswith("_ms")] if rows else []
cols = ["tl", *names, "sdpa-flash", "sdpa-cudnn", "fa4"]
best = names[0] if names else "tl"
cell = lambda x: f"{x:8.1f}" if x else f"{'n/a':>8}"
ratio = lambda a, b: f"{a / b:8.2f}" if a and b else f"{'n/a':>8}"
print(f"{'d':>4} {'causal':>6} {'seqlen':>6} " + " ".join(f"{c[-8:]:>8}" for c in cols)
      + f" {best[-5:] + '/cud':>9} {best[-5:] + '/fa4':>9}")
for r in rows:
    print(f"{r['d']:>4} {r['causal']!s:>6} {r['seqlen']:>6} " + " ".join(cell(r.get(c)) for c in cols)
          + f" {ratio(r.get(best), r.get('sdpa-cudnn'))} {ratio(r.get(best), r.get('fa4'))}"
          + (f"  fa4: {r['fa4_note']}" if r.get("fa4_note") else ""))
print("backward TFLOPS (2.5x forward FLOPs), bf16, 16 heads, 16k tokens; tl = the sm_80 skeleton, tl_<suffix>:")
print("the prebuilt builds of ALSO (tl_sm90 = the default wgmma kernel); fa4 = FlashAttention 4 (flash_attn.cute),")
print("timed only where its dq/dk/dv agree with SDPA flash's")
EOF
