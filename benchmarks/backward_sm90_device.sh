#!/usr/bin/env bash
# One device call for the experimental sm_90 backward (translator/backends/sm90_bwd.py: dQ/dK/dV on wgmma,
# an sm_90a cubin; never run before) for the plain kernels and the catalogue (bf16 and fp16, d 128; d 64
# for the plain ones), with the default sm_80 skeleton of the plain kernels beside it: run one smoke case
# under a timeout (a hang stops the script there), verify every case against autograd of the IR reference
# on odd shapes (lengths 1, 17, 1000, 4097; seqlen_q ≠ seqlen_k; GQA 2 and 7), then time it beside the
# sm_80 skeleton and SDPA flash / cuDNN (bf16, 16 heads, 16k tokens) and print the table.
#   run(command="bash benchmarks/backward_sm90_device.sh", carry=[".whl", ".cache/bwd90"], timeout_s=600)
# The cubins come prebuilt in .cache/bwd90 (on the VM: `bash benchmarks/backward_sm90_device.sh build`,
# the toolkit's nvcc 13.0, which matches the H200's driver; NVRTC's output here may not load there); the
# build step on the device only checks they are up to date and rebuilds a stale one with the device's
# nvcc. NVRTC=1 builds with the product's NVRTC path on the device instead (35 sm_80 builds took 210 s
# there in an earlier run: with ONLY narrowed, not the whole catalogue). ONLY selects the sm_90 cases
# (regex over stem_dtype_dN, default all), BENCH the timing sweep. The steps run under their own timeouts
# (smoke 90 s, verification 330 s, timing 150 s) so the table still prints inside a 600 s call.
# Beside them the A/B variant sm90ovl (`generate_backward_sm90(overlap_p=True)`: P computed while dP's
# wgmma runs, tags _sm90ovl) for the OVL cases: smoked, verified and timed in the same call (its own
# table column and its ratio to _sm90).
# And sm90cp (`generate_backward_sm90(producer=False, key_major=False)`: the kernel before the producer warp
# group, tags _sm90cp) for the CP cases, and sm90km (`key_major=True` wherever, tags _sm90km) for the KM
# cases, the same way (columns sm90cp, sm90km).
# FA4 beside them when benchmarks/fa4_install.sh installed it on this machine (two calls before this one,
# carrying .fa4/part1, then .fa4/part2, while the machine stays warm; it lands in /tmp/tl-fa4/site) or
# TL_FA4_SITE names a folder with flash-attn-4 in it: only the timing step reads that folder, through a
# sitecustomize (the DSL registers its packages with a .pth file, which PYTHONPATH alone does not read),
# and benchmarks/backward.py times FA4 once its gradients agree with SDPA flash's (the table's fa4 column
# and sm90/fa4). Without the folder nothing changes (the column says n/a).
set -u
DIR=${DIR:-.cache/bwd90}
ONLY=${ONLY:-'.'}
OVL=${OVL:-'^((causal_)?mha_fwd_bf16_d(128|64)|(alibi|sliding_window|relative_bias)_bf16_d128)$'}
CP=${CP:-'^(causal_)?mha_fwd_bf16_d128$'}
KM=${KM:-'^$'}
DQB=${DQB:-'^$'}  # sm90dqb: dQ through shared memory and one bulk reduce-add a block (dq_bulk), tags _sm90dqb
BENCH=${BENCH:-"--dims 128 --seqlens 8192"}
NVCC_FLAG="--nvcc"
[ "${NVRTC:-0}" = 1 ] && NVCC_FLAG=""
if [ "${1:-}" = build ]; then  # on the VM, before the call: the cubins the call carries
  export PYTHONPATH=$PWD
  python3 benchmarks/backward_verify.py --build "$DIR" --only '^(causal_)?mha_fwd_bf16_d128$' --nvcc
  python3 benchmarks/backward_verify.py --build "$DIR" --skeleton sm90 --only "$ONLY" --nvcc
  python3 benchmarks/backward_verify.py --build "$DIR" --skeleton sm90ovl --only "$OVL" --nvcc
  python3 benchmarks/backward_verify.py --build "$DIR" --skeleton sm90cp --only "$CP" --nvcc
  python3 benchmarks/backward_verify.py --build "$DIR" --skeleton sm90km --only "$KM" --nvcc
  python3 benchmarks/backward_verify.py --build "$DIR" --skeleton sm90dqb --only "$DQB" --nvcc
  du -sh "$DIR"
  exit 0
fi
python3 -m pip install -q --no-deps --no-index --target /tmp/site .whl/nvidia_cutlass-4.2.0.0-py3-none-any.whl
export PYTHONPATH=$PWD:/tmp/site TL_CACHE_DIR=/tmp/tlcache PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bwd90-out}
mkdir -p "$OUT"
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
# shellcheck disable=SC2086
python3 benchmarks/backward_verify.py --build "$DIR" --skeleton sm90ovl --only "$OVL" $NVCC_FLAG \
  > "$OUT/build_sm90ovl.log" 2>&1
# shellcheck disable=SC2086
python3 benchmarks/backward_verify.py --build "$DIR" --skeleton sm90cp --only "$CP" $NVCC_FLAG \
  > "$OUT/build_sm90cp.log" 2>&1
# shellcheck disable=SC2086
python3 benchmarks/backward_verify.py --build "$DIR" --skeleton sm90km --only "$KM" $NVCC_FLAG \
  > "$OUT/build_sm90km.log" 2>&1
# shellcheck disable=SC2086
python3 benchmarks/backward_verify.py --build "$DIR" --skeleton sm90dqb --only "$DQB" $NVCC_FLAG \
  > "$OUT/build_sm90dqb.log" 2>&1
wait $SM80
grep -i "fail\|error" "$OUT"/build_sm*.log | head -5
tail -qn1 "$OUT"/build_sm*.log
echo "built at ${SECONDS}s"
if command -v cuobjdump > /dev/null; then
  for tag in mha_fwd_bf16_d128_sm90 causal_mha_fwd_bf16_d128_sm90 softcap_bf16_d128_sm90 alibi_bf16_d128_sm90 \
    mha_fwd_bf16_d128_sm90ovl causal_mha_fwd_bf16_d128_sm90ovl alibi_bf16_d128_sm90ovl \
    mha_fwd_bf16_d128_sm90cp causal_mha_fwd_bf16_d128_sm90cp softcap_bf16_d128_sm90; do
    [ -f "$DIR/$tag.cubin" ] || continue
    cuobjdump -res-usage "$DIR/$tag.cubin" 2>&1 | grep -A1 "dq_dk_dv" | tail -1 | sed "s/^/$tag: /"
  done
fi

# smoke: the plain kernel (and its overlap_p variant) at one shape; 124 = one hung
mkdir -p "$DIR/smoke"
for tag in mha_fwd_bf16_d128_sm90 mha_fwd_bf16_d128_sm90ovl sliding_window_bf16_d128_sm90 document_mask_bf16_d128_sm90; do
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
grep -c "_sm90: .*: ok " "$OUT/verify.log" | sed 's/^/sm_90 verified ok: /'
grep "_sm90: " "$OUT/verify.log" | grep -vc ": ok " | sed 's/^/sm_90 not ok: /'
grep -c "_sm90ovl: .*: ok " "$OUT/verify.log" | sed 's/^/sm_90 overlap_p verified ok: /'
grep "_sm90ovl: " "$OUT/verify.log" | grep -vc ": ok " | sed 's/^/sm_90 overlap_p not ok: /'
grep -c "_sm90cp: .*: ok " "$OUT/verify.log" | sed 's/^/sm_90 without the producer verified ok: /'
grep "_sm90cp: " "$OUT/verify.log" | grep -vc ": ok " | sed 's/^/sm_90 without the producer not ok: /'
grep -c "_sm90km: .*: ok " "$OUT/verify.log" | sed 's/^/sm_90 key-major verified ok: /'
grep "_sm90km: " "$OUT/verify.log" | grep -vc ": ok " | sed 's/^/sm_90 key-major not ok: /'
grep -c "_sm90dqb: .*: ok " "$OUT/verify.log" | sed 's/^/sm_90 dq_bulk verified ok: /'
grep "_sm90dqb: " "$OUT/verify.log" | grep -vc ": ok " | sed 's/^/sm_90 dq_bulk not ok: /'

# shellcheck disable=SC2086
PYTHONPATH="$FA4_PATH$PYTHONPATH" timeout 150 python3 benchmarks/backward.py --prebuilt "$DIR" $BENCH \
  --also _sm90,_sm90ovl,_sm90cp,_sm90km,_sm90dqb --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
echo "benchmarked at ${SECONDS}s"
grep "^ *fa4" "$OUT/bench.log" | head -8
tail -n6 "$OUT/bench.log"
python3 - "$OUT/bench.json" <<'EOF'
import json, sys

try:
    rows = json.load(open(sys.argv[1]))["rows"]
except (OSError, ValueError, KeyError):
    sys.exit("no bench.json")
print(f"{'d':>4} {'causal':>6} {'seqlen':>6} {'sm90':>7} {'sm90ovl':>7} {'sm90cp':>7} {'sm80':>7} {'flash':>7} "
      f"{'cudnn':>7} {'fa4':>7} {'ovl/sm90':>8} {'sm90/cp':>8} {'sm90/sm80':>9} {'sm90/flash':>10} {'sm90/cudnn':>10} "
      f"{'sm90/fa4':>8} {'cp/fa4':>7}")
for r in rows:
    if r["pass"] != "bwd":
        continue
    v = {k: r.get(k) for k in ("tl_sm90", "tl_sm90ovl", "tl_sm90cp", "tl", "sdpa-flash", "sdpa-cudnn", "fa4")}
    cell = lambda x: f"{x:7.1f}" if x else f"{'n/a':>7}"
    ratio = lambda a, b: f"{a / b:.2f}x" if a and b else "n/a"
    print(f"{r['d']:>4} {r['causal']!s:>6} {r['seqlen']:>6} " + " ".join(cell(x) for x in v.values())
          + f" {ratio(v['tl_sm90ovl'], v['tl_sm90']):>8} {ratio(v['tl_sm90'], v['tl_sm90cp']):>8}"
          + f" {ratio(v['tl_sm90'], v['tl']):>9} {ratio(v['tl_sm90'], v['sdpa-flash']):>10}"
          f" {ratio(v['tl_sm90'], v['sdpa-cudnn']):>10} {ratio(v['tl_sm90'], v['fa4']):>8}"
          f" {ratio(v['tl_sm90cp'], v['fa4']):>7}"
          + (f"  fa4: {r['fa4_note']}" if r.get("fa4_note") else ""))
print("backward TFLOPS (2.5x forward FLOPs), bf16, 16 heads, 16k tokens; sm90 = the wgmma skeleton,")
print("sm90ovl = it with overlap_p (P while dP's wgmma runs), sm90cp = it without the producer warp group")
print("(tl_sm90km, tl_sm90dqb in the JSON: it key-major, it with dQ's bulk add);")
print("fa4 = FlashAttention 4 (flash_attn.cute),")
print("timed only where its dq/dk/dv agree with SDPA flash's")
EOF
