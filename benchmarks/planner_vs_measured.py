"""Does the planner's ranking predict measured speed? Build, verify and time its top-K and bottom-K tilings.

    python benchmarks/planner_vs_measured.py                      # hd128 bf16 sm_80, seqlen 4k, non-causal
    python benchmarks/planner_vs_measured.py --causal --part H200 --json out.json

For hd128 (heads × head_dim = 2048, batch × seqlen = 16k tokens: B=4, H=16, S=4096), every tiling the
planner accepts is ranked by its cost model; the top `--top` and bottom `--bottom` (or `--all`) are built
through the translator and NVRTC, verified against the float32 reference, and timed with CUDA events. It
prints predicted rank, predicted fraction of peak, measured TFLOPS and measured rank, then Spearman's rank
correlation between prediction and measurement, and writes everything as JSON with --json.

Without a GPU it prints the planner's ranking and exits 3.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tl_language import analyze, gpu
from translator.llm.request import Request
from translator.llm.template import render_sketch
from translator.planner import Shape, plan
from translator.planner.candidates import TUNABLE
from translator.planner.measure import device_status, measure, ranks, spearman


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="sm_80")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--part", default=None, help="GPU part for the SM count (e.g. H200: 132 SMs)")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--bottom", type=int, default=4)
    ap.add_argument("--all", action="store_true", help="measure every candidate")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    sms = gpu.sm_count(args.part) if args.part else None
    if args.part and sms is None:
        print(f"unknown part {args.part!r}", file=sys.stderr)
        return 2
    d = args.head_dim
    shape = Shape(max(1, 16384 // args.seqlen), max(1, 2048 // d), args.seqlen, args.seqlen)
    request = Request(
        text="planner benchmark",
        mask="causal" if args.causal else "none",
        d_qk=d,
        d_v=d,
        dtype=args.dtype,
        arch=args.target,
    )
    text = render_sketch(request)
    result = plan(analyze(text).model, shape, search=TUNABLE, sms=sms)
    cands = result.candidates
    if not cands:
        print("\n".join(result.problems), file=sys.stderr)
        return 1
    print(
        f"{args.target} {args.dtype} hd{d} {'causal' if args.causal else 'non-causal'} shape {shape}"
        f"{f' on {args.part} ({sms} SMs)' if sms else ''}: {len(cands)} tilings fit"
    )
    chosen = (
        cands if args.all else cands[: args.top] + [c for c in cands[-args.bottom :] if c.rank > args.top]
    )
    why = device_status()
    if why is not None:
        for c in cands:
            print(f"  {c.rank:>2}. {c.summary()}")
        print(f"no measurement: {why}", file=sys.stderr)
        return 3
    measured = measure(text, chosen, shape, log=print)
    ok = [m for m in measured if m.tflops is not None]
    measured_rank = dict(zip((id(m) for m in ok), ranks([m.tflops or 0.0 for m in ok]), strict=True))
    print(f"{'pred':>4} {'predicted':>9} {'TFLOPS':>8} {'meas':>4}  tiling")
    for m in measured:
        t = m.candidate.tiling
        tiling = f"BM={t.block_m} BN={t.block_n} warps={t.warps} stages={t.stages}"
        if m.tflops is None:
            print(
                f"{m.candidate.rank:>4} {m.candidate.score:>9.1%} {'n/a':>8} {'-':>4}  {tiling}  ({m.error})"
            )
        else:
            print(
                f"{m.candidate.rank:>4} {m.candidate.score:>9.1%} {m.tflops:>8.1f} "
                f"{measured_rank[id(m)]:>4.0f}  {tiling}"
            )
    rho = spearman([-float(m.candidate.rank) for m in ok], [m.tflops or 0.0 for m in ok])
    print(
        f"Spearman rank correlation (predicted vs measured, {len(ok)} kernels): "
        f"{'n/a' if rho is None else f'{rho:.3f}'}"
    )
    if args.json:
        import torch

        args.json.write_text(
            json.dumps(
                {
                    "gpu": torch.cuda.get_device_name(),
                    "target": args.target,
                    "dtype": args.dtype,
                    "head_dim": d,
                    "causal": args.causal,
                    "shape": [shape.batch, shape.heads, shape.seqlen_q, shape.seqlen_k],
                    "sms": sms,
                    "spearman": rho,
                    "kernels": [
                        {
                            "predicted_rank": m.candidate.rank,
                            "predicted_fraction_of_peak": m.candidate.score,
                            "breakdown": m.candidate.breakdown,
                            "block_m": m.candidate.tiling.block_m,
                            "block_n": m.candidate.tiling.block_n,
                            "warps": m.candidate.tiling.warps,
                            "stages": m.candidate.tiling.stages,
                            "tflops": m.tflops,
                            "median_ms": m.median_ms,
                            "verified": m.verified,
                            "error": m.error,
                        }
                        for m in measured
                    ],
                },
                indent=2,
            )
            + "\n"
        )
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
