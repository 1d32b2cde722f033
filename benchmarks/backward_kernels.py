"""Where a backward's time goes, kernel by kernel: ours (prebuilt builds), FA4 and cuDNN at one shape.

    python3 benchmarks/backward_kernels.py --prebuilt .cache/bwd90 --tags causal_mha_fwd_bf16_d128_sm90 \\
        --causal --d 128 --seqlens 4096,16384 --json "$OUT/kernels.json"

The same inputs as `benchmarks/backward.py` (bf16, 16 heads, 16k tokens, O and LSE from SDPA flash's
forward). Each candidate (ours, SDPA's FA2 and cuDNN, FA4) runs `--calls` backwards under
`torch.profiler` after a warm-up; the table lists every kernel it launches with its GPU time per
backward (µs) and share of the candidate's kernel time, and the time per backward no kernel covers
(gaps: the wall time of the profiled calls, synchronised, less the kernels'; the profiler's own cost is
in it). A diagnostic beside the balanced timings of `backward.py`, one candidate at a time.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CUDNN = "sdpa-cudnn"
FLASH = "sdpa-flash"  # FA2; FA4 is timed only once its gradients agree with these
FA4 = "fa4"


def _short(name: str, width: int = 60) -> str:
    """A kernel's name without its template arguments, cut to `width`."""
    base = name.split("<", 1)[0].split("(", 1)[0]
    return base if len(base) <= width else base[: width - 1] + "…"


def profile(fn: Any, calls: int) -> dict[str, Any]:
    """{"kernels": {name: µs per call}, "wall_us": per call, "gap_us": wall less the kernels}."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for i in range(3):
        fn(i)
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for i in range(calls):
            fn(i)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - start) * 1e6 / calls
    per: dict[str, float] = defaultdict(float)
    for ev in prof.events():
        if ev.device_type.name == "CUDA" and ev.device_time_total > 0:
            per[ev.name] += ev.device_time_total / calls
    total = sum(per.values())
    return {"kernels": dict(per), "kernel_us": total, "wall_us": wall, "gap_us": max(0.0, wall - total)}


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    from benchmarks import backward as bench

    fa4 = None if args.no_fa4 else bench.fa4_function()
    loaded = {tag: bench._prebuilt_backward(args.prebuilt, tag) for tag in args.tags.split(",") if tag}
    rows = []
    for s in (int(x) for x in args.seqlens.split(",")):
        d, causal = args.d, args.causal
        b = max(1, bench.TOKENS // s)
        g = torch.Generator(device="cuda").manual_seed(s + d)
        q, k, v, do = (
            torch.randn(b, s, bench.HEADS, d, device="cuda", generator=g).to(torch.bfloat16) for _ in range(4)
        )
        scale = 1.0 / math.sqrt(d)
        o, lse = bench._sdpa_lse(q, k, v, causal, scale)
        cands: dict[str, Any] = {}
        for tag, bwd in loaded.items():
            cands[tag] = functools.partial(bench._backward_run, bwd, q, k, v, o, lse, do, scale)
        for kind, name in (("FLASH_ATTENTION", FLASH), ("CUDNN_ATTENTION", CUDNN)):
            cands[name], _ = bench._autograd(kind, q, k, v, do, causal, scale)
        if fa4 is not None:
            both: dict[str, Any] = {}
            bench._add_fa4(fa4, cands, both, q, k, v, do, causal, scale)
        for name, fn in cands.items():
            res = profile(fn, args.calls)
            rows.append({"d": d, "causal": causal, "seqlen": s, "batch": b, "candidate": name, **res})
            print_row(rows[-1])
    return rows


def print_row(r: dict[str, Any]) -> None:
    print(
        f"\nd={r['d']} causal={r['causal']} S={r['seqlen']} B={r['batch']} {r['candidate']}: "
        f"kernels {r['kernel_us']:.1f} us, wall {r['wall_us']:.1f} us, gaps {r['gap_us']:.1f} us"
    )
    for name, us in sorted(r["kernels"].items(), key=lambda kv: -kv[1]):
        print(f"  {us:9.1f} us {100 * us / r['kernel_us']:5.1f} %  {_short(name)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prebuilt", type=Path, required=True)
    ap.add_argument("--tags", required=True, help="prebuilt tags, comma-separated")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--seqlens", default="4096,16384")
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--no-fa4", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rows = run(args)
    if args.json:
        import torch

        gpu = torch.cuda.get_device_name()
        args.json.write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
