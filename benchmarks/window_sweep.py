"""Sliding-window attention across window sizes, TL beside FA4 (and TL's plain causal kernel), one process,
balanced order: where the sliding-window kernel's time goes, as a fixed cost per query tile and a cost per
key block it computes.

The catalogue's `sliding_window.tl` (sm_90, bf16, d 128) is built once and verified against its IR
reference; `window_size` is a runtime Scalar, so every window runs the same binary. At each window FA4's
output (`flash_attn_func(causal=True, window_size=(W − 1, 0))`) must agree with TL's before either is
timed. A least-squares line through (key blocks computed, time) per kernel splits the time into an
intercept (what a launch costs with no key block: per-tile prologue and epilogue, waves) and a slope (the
cost of a key block); the profile of the 1024 window (docs/performance.md) has TL 16 % behind FA4 while
the plain causal kernels are equal, and this says which of the two terms holds the difference.

    python3 benchmarks/window_sweep.py [--seqlen 16384] [--batch 1] [--heads 16]
        [--windows 128,256,512,1024,2048,4096,8192,16384] [--also persistent=1;BN=64] [--json OUT]

`--also PARAM=V[;PARAM=V…]`: the same file built again with that TL Param each (one binary per entry),
verified and timed in the same interleaved runs, with its own line through the points (e.g. whether the
persistent schedule moves the per-tile intercept).

On the device machine FA4 comes from benchmarks/fa4_install.sh (two calls carrying .fa4/part1 and
.fa4/part2; `bash benchmarks/run_on_device.sh stage` does it and writes the sitecustomize that puts
/tmp/tl-fa4/site on the path of anything run with PYTHONPATH=$PWD:$PWD/.cache/site).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.variant_cases import fa4_available, for_shape, plain_texts, with_param  # noqa: E402

WINDOWS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def key_blocks(seqlen: int, window: int, block_m: int, block_n: int) -> int:
    """Key blocks a causal sliding-window kernel computes over one (batch, head): for each query tile, the
    blocks between its first row's window start and its last row's diagonal (seqlen_q == seqlen_k)."""
    total = 0
    for m in range(math.ceil(seqlen / block_m)):
        q_lo, q_hi = m * block_m, min(seqlen, (m + 1) * block_m) - 1
        kv_lo = max(0, q_lo - window + 1)
        total += q_hi // block_n - kv_lo // block_n + 1
    return total


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys against xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - slope * mx, slope


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seqlen", type=int, default=16384)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--windows", default=",".join(map(str, WINDOWS)))
    ap.add_argument("--target-s", type=float, default=0.4)
    ap.add_argument("--also", default="", help="PARAM=V[;PARAM=V...]: extra TL builds timed beside")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    also = [a.split("=", 1) for a in args.also.split(";") if a.strip()]

    import torch

    from pipeline.build import translate_text
    from runner.bench import time_interleaved
    from runner.compile import CompileError, CompileJob, compile_many
    from runner.launch import cuda_device_arch, launch, load
    from runner.verify import Shape, verify

    window_text = (ROOT / "examples" / "variants" / "sliding_window.tl").read_text()
    texts = {"sliding_window": window_text, "plain_causal": plain_texts()["plain_causal"]}
    for param, value in also:
        texts[f"tl-{param}={value}"] = with_param(window_text, param.strip(), value.strip())
    windows = [n for n in texts if n != "plain_causal"]  # the sliding-window builds
    built = {n: translate_text(for_shape(t, "bf16", 128), Path(f"{n}_sweep.tl")) for n, t in texts.items()}
    device = cuda_device_arch()
    jobs = [CompileJob(source=b.source, arch=b.spec.arch, name=f"{n}.cu", device_arch=device)
            for n, b in built.items()]  # fmt: skip
    loaded: dict[str, Any] = {}
    for (n, b), c in zip(built.items(), compile_many(jobs), strict=True):
        if isinstance(c, CompileError):
            print(f"compile failed: {n}: {str(c)[:300]}")
            return 1
        loaded[n] = load(c, b.spec)
    H, D, B, S = args.heads, 128, args.batch, args.seqlen
    for n in texts:
        check = verify(loaded[n], Shape(1, 2, 2, 1000, 1000), seed=1)
        print(f"{n}: {'verified' if check.passed else 'VERIFICATION FAILED'}")
        if not check.passed:
            print(check)
            return 1
    fa4 = fa4_available()
    if fa4:
        from flash_attn.cute import flash_attn_func
    else:
        print("FA4 (flash_attn.cute) does not import: TL only")
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, S, H, D, device="cuda", generator=g).to(torch.bfloat16) for _ in range(3))
    scale = 1 / math.sqrt(D)
    spec = built["sliding_window"].spec
    bm, bn = spec.block_m, spec.block_n
    rows: list[dict[str, Any]] = []
    for window in [int(w) for w in args.windows.split(",") if w]:
        o, lse = torch.empty_like(q), torch.empty(B, H, S, device="cuda", dtype=torch.float32)
        extras = {"window_size": window}
        fns: dict[str, Any] = {}
        for n in windows:
            fns["tl" if n == "sliding_window" else n] = lambda i, o=o, lse=lse, extras=extras, n=n: launch(
                loaded[n], q, k, v, o, lse, extras=extras
            )
        launch(loaded["sliding_window"], q, k, v, o, lse, extras=extras)
        row: dict[str, Any] = {"window": window, "key_blocks": key_blocks(S, window, bm, bn)}
        if fa4:
            fa4_fn = lambda i, w=window: flash_attn_func(  # noqa: E731
                q, k, v, softmax_scale=scale, causal=True, window_size=(w - 1, 0)
            )
            out = fa4_fn(0)
            err = float(((out[0] if isinstance(out, tuple) else out).float() - o.float()).abs().max())
            row["fa4_max_abs_vs_tl"] = err
            if err < 5e-2:
                fns["fa4"] = fa4_fn
            else:
                print(f"window {window}: FA4 disagrees with TL (max abs {err:.3e}); FA4 not timed")
        if window >= S:  # the whole causal triangle: the plain causal kernel beside it
            po, plse = torch.empty_like(q), torch.empty_like(lse)
            fns["tl-plain-causal"] = lambda i, po=po, plse=plse: launch(
                loaded["plain_causal"], q, k, v, po, plse
            )
        timings = time_interleaved(fns, target_s=args.target_s, warmup_s=0.1)
        for cand, tm in timings.items():
            row[f"{cand}_us"] = None if isinstance(tm, Exception) else round(tm.median_ms * 1e3, 2)
        rows.append(row)
        print(json.dumps(row), flush=True)

    gpu = torch.cuda.get_device_name()
    print(
        f"\nSliding window (causal), bf16 d{D} H{H}, B {B} x {S}, BM {bm} BN {bn}, {gpu}, "
        f"{time.strftime('%Y-%m-%d')}"
    )
    print(f"{'window':>7s} {'key blocks':>10s} {'tl us':>9s} {'fa4 us':>9s} {'tl/fa4 time':>11s}")
    for r in rows:
        t, f = r.get("tl_us"), r.get("fa4_us")
        ratio = f"{t / f:11.3f}" if t and f else f"{'—':>11s}"
        print(
            f"{r['window']:7d} {r['key_blocks']:10d} {t or float('nan'):9.1f} "
            f"{f or float('nan'):9.1f} {ratio}"
        )
    fits: dict[str, Any] = {}
    for cand in ("tl", "fa4", *(n for n in windows if n != "sliding_window")):
        pts = [(r["key_blocks"] * B * H, r[f"{cand}_us"]) for r in rows if r.get(f"{cand}_us")]
        if len(pts) >= 2:
            a, b = fit([p[0] for p in pts], [p[1] for p in pts])
            fits[cand] = {"intercept_us": round(a, 2), "us_per_1000_key_blocks": round(b * 1e3, 4)}
            print(f"{cand}: time ≈ {a:.1f} us + {b * 1e3:.3f} us per 1000 key blocks (least squares)")
    if args.json:
        meta = {"gpu": gpu, "date": time.strftime("%Y-%m-%d"), "batch": B, "seqlen": S, "heads": H}
        Path(args.json).write_text(json.dumps({**meta, "block_m": bm, "block_n": bn, "rows": rows,
                                               "fits": fits}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
