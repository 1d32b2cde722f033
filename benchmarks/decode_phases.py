"""Where a split-KV decode step's time goes: the whole step (attention kernel + combine) beside the attention
kernel alone and the combine alone, at a few split counts, with cuDNN as the yardstick, every candidate a
CUDA graph replay timed in `runner.bench.time_interleaved`'s balanced order.

    python3 benchmarks/decode_phases.py [--shapes 1x131072,8x32768] [--splits 22,45,90] [--json OUT.json]

The contiguous build of examples/inference/paged_decode.tl (as benchmarks/decode.py builds it), GQA 32/8,
d 128, bf16, one query row per sequence. The phase candidates launch one of the two kernels of a step
with the argument structs a real call packed (`runner.decode`'s plan for that signature) and their own
fp32 partial buffers, so nothing they write is freed memory; their outputs are not checked (the whole
step is, against cuDNN, before anything is timed). An A/B harness: it reads `runner.decode`'s private
plans and is no product path.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.decode import HEADS, HEADS_KV, D, graphed, tl_text  # noqa: E402


def phase_fns(
    loaded: Any, q: Any, k: Any, v: Any, splits: int, label: str
) -> tuple[dict[str, Callable[[int], Any]], tuple[Any, ...]]:
    """`{label} step`, `{label} main`, `{label} combine` for one split count, and the buffers the phase
    launches write (keep them alive as long as the candidates)."""
    import torch

    from runner import decode
    from runner.abi import COMBINE_THREADS

    decode.decode_attention(loaded, q, k, v, num_splits=splits)
    plan = next(p for p in reversed(list(decode._PLANS.values())) if p.loaded is loaded)
    spec = loaded.spec
    n_o, n_lse = plan.accum_numel
    accum = torch.zeros(n_o + n_lse, dtype=torch.float32, device=q.device)
    o = torch.empty(plan.o_shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(plan.lse_shape, dtype=torch.float32, device=q.device)
    ptrs = {"q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "o": o.data_ptr(), "lse": lse.data_ptr(),
            "o_accum": accum.data_ptr(), "lse_accum": accum.data_ptr() + 4 * n_o}  # fmt: skip

    def main(i: int) -> Any:
        stream = int(torch.cuda.current_stream().cuda_stream)
        plan.main.set(ptrs)
        plan.main.fire(plan.grid, spec.threads, spec.shared_bytes, stream)
        return accum

    def combine(i: int) -> Any:
        stream = int(torch.cuda.current_stream().cuda_stream)
        plan.combine.set({n: ptrs[n] for n in ("o_accum", "lse_accum", "o", "lse")})
        plan.combine.fire(plan.combine_grid, COMBINE_THREADS, 0, stream)
        return o

    fns: dict[str, Callable[[int], Any]] = {
        f"{label} step": lambda i: decode.decode_attention(loaded, q, k, v, num_splits=splits),
        f"{label} main": main,
    }
    if plan.combine is not None:
        fns[f"{label} combine"] = combine
    return fns, (accum, o, lse)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="1x131072,8x32768", help="BATCHxSEQLEN_K,...")
    ap.add_argument("--splits", default="", help="split counts besides the automatic one")
    ap.add_argument("--target-s", type=float, default=0.4)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from pipeline.build import translate_text
    from runner.bench import time_interleaved
    from runner.compile import CompileJob, compile_many
    from runner.decode import auto_splits
    from runner.launch import cuda_device_arch, load, sm_count

    built = translate_text(tl_text(False, {}), Path("decode_phases.tl"))
    (compiled,) = compile_many(
        [
            CompileJob(
                source=built.source,
                arch=built.spec.arch,
                name="decode_phases.cu",
                device_arch=cuda_device_arch(),
            )
        ]
    )
    loaded = load(compiled, built.spec)
    gpu = torch.cuda.get_device_name()
    rows: list[dict] = []
    for shape in args.shapes.split(","):
        batch, seqlen = (int(x) for x in shape.split("x"))
        gen = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(batch, 1, HEADS, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        kb = torch.randn(batch, HEADS_KV, seqlen, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        vb = torch.randn_like(kb)
        k, v = kb.transpose(1, 2), vb.transpose(1, 2)
        qb = q.transpose(1, 2).contiguous()
        auto = auto_splits(
            loaded.spec, batch, 1, HEADS, HEADS_KV, seqlen, sm_count(torch.cuda.current_device())
        )
        counts = [auto] + [int(s) for s in args.splits.split(",") if s and int(s) != auto]

        def cudnn(i: int, qb: Any = qb, kb: Any = kb, vb: Any = vb) -> Any:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(qb, kb, vb, enable_gqa=True)

        ref = cudnn(0).transpose(1, 2).float()
        fns: dict[str, Callable[[int], Any]] = {"cudnn": cudnn}
        keep: list[tuple[Any, ...]] = []
        for s in counts:
            label = f"s={s}{' (auto)' if s == auto else ''}"
            phase, buffers = phase_fns(loaded, q, k, v, s, label)
            keep.append(buffers)
            err = float((phase[f"{label} step"](0)[0].float() - ref).abs().max())
            print(f"B{batch} x {seqlen} {label}: max |step - cuDNN| = {err:.2e}", flush=True)
            if not err < 2e-2:
                print("  differs from cuDNN: not timed", flush=True)
                continue
            fns.update(phase)
        fns = {name: graphed(fn) for name, fn in fns.items()}
        times = time_interleaved(fns, target_s=args.target_s, warmup_s=0.05)
        nbytes = 2 * batch * seqlen * HEADS_KV * D * 2
        base = times["cudnn"]
        for name, t in times.items():
            if isinstance(t, Exception):
                print(f"  {name}: {type(t).__name__}: {t}", flush=True)
                continue
            rows.append({"shape": f"B{batch} x {seqlen}", "candidate": name, "us": t.median_ms * 1e3,
                         "GB/s": nbytes / t.median_ms / 1e6, "vs_cudnn_time": t.median_ms / base.median_ms,
                         "spread": t.spread, "runs": t.runs})  # fmt: skip
        del keep
    meta = {"gpu": gpu, "date": time.strftime("%Y-%m-%d"), "argv": sys.argv[1:]}
    if args.json:
        Path(args.json).write_text(json.dumps({**meta, "rows": rows}, indent=1))
    print(
        f"\nDecode phases, GQA {HEADS}/{HEADS_KV}, d {D}, bf16, contiguous KV, {gpu}, {meta['date']}, "
        "graph replays"
    )
    print(
        f"{'shape':14s} {'candidate':22s} {'us':>8s} {'GB/s (K+V)':>11s} {'time/cuDNN':>10s} {'spread':>7s}"
    )
    for r in rows:
        print(f"{r['shape']:14s} {r['candidate']:22s} {r['us']:8.1f} {r['GB/s']:11.0f} "
              f"{r['vs_cudnn_time']:10.3f} {r['spread']:7.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
