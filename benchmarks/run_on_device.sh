#!/usr/bin/env bash
# Run on the lent GPU machine, unattended: the GPU test suite, then the benchmark; logs go to $OUT.
#
#   bash benchmarks/run_on_device.sh [all|tests|bench|stage] [extra args for benchmarks/attention.py]
#   bash benchmarks/run_on_device.sh sweep --only NAME,NAME [--seqlens 4096,16384]   (sm_90 A/B variants)
#   bash benchmarks/run_on_device.sh profile [--kernels tl,fa4 --cases hd128,hd64]     (ncu: ours beside FA4)
#   (sweep or variants and a profile may follow each other: `sweep ARGS -- profile ARGS`)
#   bash benchmarks/run_on_device.sh variants [args for benchmarks/variants.py]
#     (the catalogue verified on both targets, then timed against FlexAttention and FA4; default args:
#      --seqlens 4096,8192,16384; TL_VERIFY_CATALOGUE=0 skips the verification of the catalogue, =a,b
#      verifies only those,
#      TL_PROFILE_S=N keeps N seconds for a profile after it, e.g. `--cases v:document_mask`)
#
# Needs the wheels in .whl/ (carry it): nvidia-cutlass (the CuTe headers), and pytest with its
# dependencies for images without pytest. Everything lands in .cache/ (git-ignored, kept while the machine
# stays warm): installed wheels in .cache/site, compiled kernels in .cache/kernels, so a second call
# starts from a warm compile cache. The whole run keeps inside TL_DEVICE_BUDGET_S seconds (default 570:
# one device command may run 600 s); each step has its own timeout, so nothing hangs.
# FA4 baseline: in every mode, benchmarks/fa4_install.sh runs first: a carried .fa4/part1 is staged (call 1),
# a carried .fa4/part2 completes the install into /tmp/tl-fa4/site (call 2, on the same warm machine), which
# then sets TL_FA4_SITE; `stage` does only that. Without .fa4 folders it changes nothing. Or set
# TL_FA4_SITE=/dir with flash-attn-4 installed (`pip install --target`) yourself.
set -uo pipefail
export PYTHONUNBUFFERED=1

cd "$(dirname "$0")/.." || exit 1
ROOT="$PWD"
FINAL_OUT="${OUT:-$ROOT/.device-out}"
OUT="$FINAL_OUT/work"  # everything lands here; the end keeps a few files and a tarball (8 files come back)
mkdir -p "$OUT"
MODE="${1:-all}"
shift || true
case "$MODE" in
    all | tests | bench | stage | sweep | profile | variants) ;;
    *) echo "run_on_device: unknown mode '$MODE' (all, tests, bench, stage, sweep, profile or variants)"; exit 2 ;;
esac
# `sweep A… -- profile B…`: the sweep gets A…, then the profile runs with B….
MODE_ARGS=()
PROFILE_ARGS=()
if [ "$MODE" = profile ]; then PROFILE_ARGS=("$@"); set --; fi
while [ "$#" -gt 0 ]; do
    if [ "$1" = "--" ] && [ "${2:-}" = profile ]; then shift 2; PROFILE_ARGS=("$@"); DO_PROFILE=1; break; fi
    MODE_ARGS+=("$1"); shift
done
set -- "${MODE_ARGS[@]}"
[ "$MODE" = profile ] && DO_PROFILE=1
BUDGET="${TL_DEVICE_BUDGET_S:-570}"
START=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - START))); }
log() { echo "[$(date +%H:%M:%S) +$(($(date +%s) - START))s] $*" | tee -a "$OUT/run.log"; }

SITE="$ROOT/.cache/site"
mkdir -p "$SITE" "$ROOT/.cache/kernels"
export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export TL_CACHE_DIR="$ROOT/.cache/kernels"

# Wheels: install each only when the image lacks the module (never shadow the image's own packages).
install_if_missing() {  # module wheel-glob
    if ! python3 -c "import $1" >/dev/null 2>&1; then
        local whl
        # shellcheck disable=SC2012,SC2086  # $2 is a glob; wheel names have no odd characters
        whl=$(ls "$ROOT"/.whl/$2 2>/dev/null | head -n1)
        if [ -z "$whl" ]; then
            log "missing: python module $1 and no wheel .whl/$2"
            return 1
        fi
        timeout 120 python3 -m pip install --no-deps --no-index --target "$SITE" "$whl" >>"$OUT/pip.log" 2>&1 \
            || { log "pip install $whl failed (see pip.log)"; return 1; }
        log "installed $(basename "$whl")"
    fi
}
install_if_missing cutlass_library 'nvidia_cutlass-*.whl'
for pair in "pluggy pluggy-*.whl" "iniconfig iniconfig-*.whl" "packaging packaging-*.whl" "pytest pytest-*.whl"; do
    # shellcheck disable=SC2086
    install_if_missing $pair
done
# The language server's worker (tested on the GPU too) needs lsprotocol; the image's attrs may be older than
# cattrs wants, so these pure-Python wheels always go in (into .cache/site, ahead of the image's packages).
for whl in "$ROOT"/.whl/typing_extensions-*.whl "$ROOT"/.whl/attrs-*.whl "$ROOT"/.whl/cattrs-*.whl \
    "$ROOT"/.whl/lsprotocol-*.whl "$ROOT"/.whl/pygls-*.whl; do
    [ -f "$whl" ] || { log "missing wheel: $whl"; continue; }
    timeout 120 python3 -m pip install --no-deps --no-index --upgrade --target "$SITE" "$whl" >>"$OUT/pip.log" 2>&1 \
        || log "pip install $whl failed (see pip.log)"
done
# FA4 first (call 1 stages its piece even when its tests then run out of time); its output goes to run.log.
FA4_STATUS="not carried"
fa4_log=$(timeout --kill-after=5 400 bash benchmarks/fa4_install.sh 2>&1)
case $? in
    0) FA4_STATUS="installed"; [ -z "${TL_FA4_SITE:-}" ] && TL_FA4_SITE="${TL_FA4_DIR:-/tmp/tl-fa4}/site" ;;
    3) FA4_STATUS="part 1 staged: send call 2 (carry .fa4/part2) now" ;;
    4) ;;
    *) FA4_STATUS="install FAILED (see below and run.log)" ;;
esac
log "FA4: $FA4_STATUS"; printf '%s\n' "$fa4_log" | sed 's/^/  /' | tee -a "$OUT/run.log"
if [ -n "${TL_FA4_SITE:-}" ] && [ -d "$TL_FA4_SITE" ]; then
    # flash-attn-4's CuTe DSL registers itself through a .pth file, which only site.addsitedir reads.
    printf 'import site\nsite.addsitedir(%s)\n' "'$TL_FA4_SITE'" >"$SITE/sitecustomize.py"
fi

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    timeout 60 python3 - <<'EOF'
import sys
import torch, cuda.core, cuda.bindings
from cuda.bindings import nvrtc
from runner.toolchain import toolchain
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda.core", cuda.core.__version__,
      "cuda.bindings", cuda.bindings.__version__, "nvrtc", nvrtc.nvrtcVersion()[1:])
print(toolchain())
EOF
} >"$OUT/env.txt" 2>&1
log "environment:"; tee -a "$OUT/run.log" <"$OUT/env.txt"

TEST_STATUS="not run"
if [ "$MODE" = all ] || [ "$MODE" = tests ]; then
    T=$(( $(left) - 60 ))
    [ "$MODE" = all ] && [ "$T" -gt 330 ] && T=330
    log "GPU tests (timeout ${T}s)"
    # shellcheck disable=SC2086
    timeout --kill-after=10 "$T" python3 -m pytest ${TL_GPU_TESTS:-tests/gpu} -m gpu -p no:cacheprovider -rfE \
        --junitxml="$OUT/gpu-junit.xml" 2>&1 | tee "$OUT/gpu-tests.log"
    rc=${PIPESTATUS[0]}
    TEST_STATUS="exit $rc: $(grep -E '[0-9]+ (passed|failed|skipped|errors?)' "$OUT/gpu-tests.log" | tail -n1)"
    [ "$rc" = 124 ] && TEST_STATUS="TIMED OUT after ${T}s; $TEST_STATUS"
    log "GPU tests: $TEST_STATUS"
fi

SASS_STATUS="not run"
if [ "$MODE" = all ] && [ "$(left)" -gt 200 ]; then
    log "SASS and resource report (cache hits)"
    timeout --kill-after=5 90 python3 benchmarks/sass_report.py --out "$OUT/sass" >"$OUT/sass.log" 2>&1
    SASS_STATUS="exit $?"
    log "SASS report: $SASS_STATUS"
fi

BENCH_STATUS="not run"
if [ "$MODE" = all ] || [ "$MODE" = bench ]; then
    RESERVE=$([ "$MODE" = all ] && echo 100 || echo 15)  # leave time for the planner sweep
    T=$(( $(left) - RESERVE ))
    if [ "$T" -lt 60 ]; then
        BENCH_STATUS="skipped: only ${T}s left"
    else
        log "benchmark (timeout ${T}s, configurations started until $((T - 60))s)"
        # Without arguments: what issue 3 measures (bf16, hd 64/128/256, causal on/off) at four lengths,
        # which fits one call after the tests; pass arguments (e.g. `bench --dtype bf16,fp16`) for more.
        if [ "$#" -eq 0 ]; then set -- --dtype bf16 --seqlens 1024,4096,8192,16384; fi
        timeout --kill-after=10 "$T" python3 benchmarks/attention.py --json "$OUT/bench.json" \
            --budget-s $((T - 60)) "$@" 2>&1 | tee "$OUT/bench.log"
        rc=${PIPESTATUS[0]}
        BENCH_STATUS="exit $rc"
        [ "$rc" = 124 ] && BENCH_STATUS="TIMED OUT after ${T}s (partial JSON in bench.json)"
    fi
    log "benchmark: $BENCH_STATUS"
fi

SWEEP_STATUS="not run"
if [ "$MODE" = sweep ]; then
    # The Hopper backend's A/B sweep: compile, SASS, hang-safe verification and timing of the
    # benchmarks/sm90_variants.py variants named in the arguments (e.g. --only a,b --seqlens 4096).
    T=$(( $(left) - 15 ))
    log "sm_90 variant sweep (timeout ${T}s): $*"
    OUT="$OUT/sweep" timeout --kill-after=10 "$T" python3 -m benchmarks.sm90_device_check "$@" \
        >"$OUT/sweep.log" 2>&1
    rc=$?
    SWEEP_STATUS="exit $rc"
    [ "$rc" = 124 ] && SWEEP_STATUS="TIMED OUT after ${T}s (partial results in sweep/results.json)"
    [ -f "$OUT/sweep/results.json" ] && cp "$OUT/sweep/results.json" "$OUT/sweep.json"
    log "sweep: $SWEEP_STATUS"
fi

VARIANTS_STATUS="not run"
if [ "$MODE" = variants ]; then
    # TL_VERIFY_CATALOGUE=0 skips the catalogue check (both targets and dtypes) when the kernels did not
    # change since the last one (variants.py verifies every build it times in any case); NAME,NAME checks
    # only those variants (the ones a change touched).
    VERIFY="${TL_VERIFY_CATALOGUE:-1}"
    if [ "$VERIFY" != 0 ]; then
        T=$(( $(left) - 15 ))
        ONLY=()
        [ "$VERIFY" != 1 ] && ONLY=(--only "$VERIFY")
        log "catalogue verification ${ONLY[*]} (timeout $((T / 2))s)"
        timeout --kill-after=10 $((T / 2)) python3 benchmarks/verify_variants.py --json "$OUT/verify.json" \
            "${ONLY[@]}" >"$OUT/verify.log" 2>&1
        VARIANTS_STATUS="verify exit $?: $(tail -n1 "$OUT/verify.log")"
    else
        VARIANTS_STATUS="catalogue verification skipped (TL_VERIFY_CATALOGUE=0)"
    fi
    T=$(( $(left) - 15 - ${TL_PROFILE_S:-0} ))  # TL_PROFILE_S: seconds kept for a `-- profile` after it
    if [ "$#" -eq 0 ]; then set -- --seqlens 4096,8192,16384; fi
    log "variants benchmark (timeout ${T}s): $*"
    timeout --kill-after=10 "$T" python3 benchmarks/variants.py --json "$OUT/variants.json" "$@" \
        >"$OUT/variants.log" 2>&1
    VARIANTS_STATUS="$VARIANTS_STATUS; bench exit $?"
    log "variants: $VARIANTS_STATUS"
fi

PROFILE_STATUS="not run"
if [ "${DO_PROFILE:-0}" = 1 ]; then
    T=$(( $(left) - 15 ))
    log "ncu profile (timeout ${T}s): ${PROFILE_ARGS[*]}"
    timeout --kill-after=10 "$T" python3 benchmarks/profile_ncu.py --out "$OUT/ncu" "${PROFILE_ARGS[@]}" \
        >"$OUT/profile.log" 2>&1
    PROFILE_STATUS="exit $?"
    tar -czf "$FINAL_OUT/ncu.tar.gz" -C "$OUT" ncu 2>/dev/null
    log "profile: $PROFILE_STATUS"
fi

PLANNER_STATUS="not run"
if [ "$MODE" = all ] && [ "$(left)" -gt 60 ]; then
    T=$(( $(left) - 10 ))
    log "planner ranking vs measured (timeout ${T}s)"
    timeout --kill-after=5 "$T" python3 benchmarks/planner_vs_measured.py --part H200 --top 4 --bottom 2 \
        --json "$OUT/planner.json" >"$OUT/planner.log" 2>&1
    PLANNER_STATUS="exit $?"
    log "planner: $PLANNER_STATUS"
fi

echo
echo "===== summary ($(head -n1 "$OUT/env.txt")) ====="
grep -E "^compiled [0-9]+/" "$OUT/gpu-tests.log" 2>/dev/null | tail -n1
echo "FA4: $FA4_STATUS${TL_FA4_SITE:+ (TL_FA4_SITE=$TL_FA4_SITE)}"
echo "GPU tests: $TEST_STATUS"
grep -E "^(FAILED|ERROR) " "$OUT/gpu-tests.log" 2>/dev/null | head -n 15
echo "benchmark: $BENCH_STATUS"
if [ -f "$OUT/bench.log" ]; then
    sed -n '/^TFLOPS on/,$p' "$OUT/bench.log" | head -n 60
fi
echo "variants: $VARIANTS_STATUS"
[ -f "$OUT/variants.log" ] && sed -n '/^TFLOPS on kept/,$p' "$OUT/variants.log"
echo "SASS report: $SASS_STATUS"
tail -n 4 "$OUT/sass.log" 2>/dev/null
echo "planner: $PLANNER_STATUS"
tail -n 14 "$OUT/planner.log" 2>/dev/null
echo "sweep: $SWEEP_STATUS"
sed -n '/^variant  /,$p' "$OUT/sweep.log" 2>/dev/null | head -n 60
echo "profile: $PROFILE_STATUS"
sed -n '/^metric  /,$p' "$OUT/profile.log" 2>/dev/null | head -n 70
grep -E "no report|ncu is not|Error|error" "$OUT/profile.log" 2>/dev/null | head -n 8
for f in run.log gpu-tests.log bench.log bench.json planner.json sass.log sweep.log sweep.json profile.log \
    verify.json variants.json variants.log; do
    [ -f "$OUT/$f" ] && cp "$OUT/$f" "$FINAL_OUT/"
done
tar -czf "$FINAL_OUT/all-logs.tar.gz" -C "$OUT" . 2>/dev/null && rm -rf "$OUT"
echo "logs: $FINAL_OUT (run.log, the logs and JSON of the steps that ran, all-logs.tar.gz)"
