"""Decode attention on the GPU: bytes of K and V read per second, TL's split-KV kernels (paged and
contiguous KV) beside cuDNN (SDPA's cudnn backend), SDPA's FlashAttention 2 and, with --flex,
FlexAttention, in one process and in the balanced order of `runner.bench.time_interleaved`.

    python3 benchmarks/decode.py [--shapes 8x32768,1x131072,64x4096] [--ab BN=32 ...] [--flex]
                                 [--json OUT.json]

One query row per sequence, GQA 32/8, head dim 128, bf16. The TL kernels are
examples/inference/paged_decode.tl built for sm_90 (the same cp.async + mma.sync kernel as sm_80) with
its 64-token pages in random order, and the same file without `Param page_size` (contiguous KV);
`--ab P=V` adds both rebuilt with one Param changed. Every candidate's output is compared with cuDNN's
before it is timed. Bytes: 2 · batch · seqlen_k · heads_kv · d · 2 (K and V once each).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HEADS, HEADS_KV, D, PAGE = 32, 8, 128, 64


def tl_text(page: bool, ab: dict[str, int]) -> str:
    text = (ROOT / "examples" / "inference" / "paged_decode.tl").read_text()
    text = re.sub(r"(?m)^Target .*$", "Target sm_90", text)
    if not page:
        text = re.sub(r"(?m)^Param page_size = .*\n", "", text)
    for name, value in ab.items():
        text, n = re.subn(rf"(?m)^Param {name} = \d+", f"Param {name} = {value}", text)
        if not n:
            text = text.replace("Mask none", f"Param {name} = {value}\nMask none", 1)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="8x32768,1x131072,64x4096", help="BATCHxSEQLEN_K,...")
    ap.add_argument("--ab", action="append", default=[], help="P=V[,P=V]: another TL build (repeatable)")
    ap.add_argument("--flex", action="store_true", help="also time FlexAttention (compiles per shape)")
    ap.add_argument("--target-s", type=float, default=1.0, help="timed seconds per candidate and shape")
    ap.add_argument("--candidates", default="", help="comma-separated names to time (default: all)")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)

    import torch

    from pipeline.build import translate_text
    from runner.compile import CompileError, CompileJob, compile_many
    from runner.launch import cuda_device_arch, load

    device_arch = cuda_device_arch()
    configs = [("", {})] + [
        (spec, {k: int(v) for k, v in (kv.split("=") for kv in spec.split(","))}) for spec in args.ab
    ]
    builds = []
    only = {c for c in args.candidates.split(",") if c}
    for label, ab in configs:
        for page in (True, False):
            if only and not any(c.startswith("tl-") for c in only):
                continue
            name = f"tl-{'paged' if page else 'contig'}{' ' + label if label else ''}"
            # the base paged build has verify_decode.py's file name: the compile cache serves both
            tl = "paged_decode_sm_90_bf16.tl" if page and not ab else f"decode_{len(builds)}.tl"
            builds.append((name, page, translate_text(tl_text(page, ab), Path(tl))))
    jobs = [
        CompileJob(source=t.source, arch=t.spec.arch, name=f"decode_{i}.cu", device_arch=device_arch)
        for i, (_, _, t) in enumerate(builds)
    ]
    compiled = compile_many(jobs)
    print(f"compiled {len(jobs)} TL kernels", flush=True)
    kernels = {}
    for (name, page, t), c in zip(builds, compiled, strict=True):
        if isinstance(c, CompileError):
            print(f"COMPILE FAIL {name}: {str(c)[:500]}", flush=True)
            continue
        kernels[name] = (page, load(c, t.spec))

    rows = []
    for shape in args.shapes.split(","):
        batch, seqlen = (int(x) for x in shape.split("x"))
        only = {c for c in args.candidates.split(",") if c}
        rows += bench_shape(batch, seqlen, kernels, flex=args.flex, target_s=args.target_s, only=only)
        torch.cuda.empty_cache()

    gpu = torch.cuda.get_device_name()
    print(f"\nDecode, GQA {HEADS}/{HEADS_KV}, d {D}, bf16, seqlen_q 1, {gpu}, {time.strftime('%Y-%m-%d')}")
    print(f"{'shape':14s} {'candidate':22s} {'us':>9s} {'GB/s (K+V)':>11s} {'x cuDNN':>8s} {'spread':>7s}")
    for r in rows:
        print(f"{r['shape']:14s} {r['candidate']:22s} {r['us']:9.1f} {r['GB/s']:11.0f} {r['vs_cudnn']:8.3f} "
              f"{r['spread']:7.3f}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(
            json.dumps({"gpu": gpu, "date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1)
        )
    return 0


def bench_shape(
    batch: int, seqlen: int, kernels: dict, *, flex: bool, target_s: float, only: set[str]
) -> list[dict]:
    """Check, then time every candidate on one shape; a row per candidate that ran."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from runner.bench import time_interleaved
    from runner.decode import decode_attention

    dev, dt = "cuda", torch.bfloat16
    gen = torch.Generator(device=dev).manual_seed(0)
    nbytes = 2 * batch * seqlen * HEADS_KV * D * 2
    q = torch.randn(batch, 1, HEADS, D, device=dev, dtype=dt, generator=gen)
    k = torch.randn(batch, seqlen, HEADS_KV, D, device=dev, dtype=dt, generator=gen)
    v = torch.randn(batch, seqlen, HEADS_KV, D, device=dev, dtype=dt, generator=gen)
    n_pages = batch * seqlen // PAGE
    perm = torch.randperm(n_pages, device=dev, generator=gen)  # pages in random order
    table = perm.reshape(batch, seqlen // PAGE).to(torch.int32)
    kp = torch.empty(n_pages, PAGE, HEADS_KV, D, device=dev, dtype=dt)
    vp = torch.empty_like(kp)
    kp[table.reshape(-1).long()] = k.reshape(n_pages, PAGE, HEADS_KV, D)
    vp[table.reshape(-1).long()] = v.reshape(n_pages, PAGE, HEADS_KV, D)
    lens = torch.full((batch,), seqlen, dtype=torch.int32, device=dev)
    qb, kb, vb = (x.transpose(1, 2).contiguous() for x in (q, k, v))  # SDPA's (batch, heads, seqlen, d)
    del k, v
    kc, vc = kb.transpose(1, 2), vb.transpose(1, 2)  # (batch, seqlen, heads_kv, d) views of SDPA's
    fns = {}
    for name, (page, loaded) in kernels.items():
        if page:
            fns[name] = lambda i, L=loaded: decode_attention(
                L, q, kp, vp, block_table=table, cache_seqlens=lens
            )
        else:
            fns[name] = lambda i, L=loaded: decode_attention(L, q, kc, vc)

    def sdpa(backend):
        def run(i: int):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qb, kb, vb, enable_gqa=True)

        return run

    fns["cudnn"] = sdpa(SDPBackend.CUDNN_ATTENTION)
    fns["sdpa-fa2"] = sdpa(SDPBackend.FLASH_ATTENTION)
    if flex:
        from torch.nn.attention.flex_attention import flex_attention

        compiled = torch.compile(flex_attention, dynamic=False)
        fns["flex"] = lambda i: compiled(qb, kb, vb, enable_gqa=True)
    ref = fns["cudnn"](0).transpose(1, 2).float()
    if only:
        fns = {name: fn for name, fn in fns.items() if name in only}
    checked = {}
    for name, fn in list(fns.items()):
        try:
            out = fn(0)
            out = out[0] if isinstance(out, tuple) else out
            if name in ("cudnn", "sdpa-fa2", "flex"):
                out = out.transpose(1, 2)
            checked[name] = err = float((out.float() - ref).abs().max())
            if not err < 2e-2:
                print(f"  {name}: differs from cuDNN by {err:.3e}; not timed", flush=True)
                del fns[name]
        except Exception as exc:  # a baseline that cannot run this shape is reported, not fatal
            print(f"  {name}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            del fns[name]
    print(f"B{batch} x {seqlen}: timing {', '.join(fns)}", flush=True)
    times = time_interleaved(fns, target_s=target_s, warmup_s=0.05)
    base = times.get("cudnn")
    rows = []
    for name, t in times.items():
        if isinstance(t, Exception):
            print(f"  {name}: {type(t).__name__}: {t}", flush=True)
            continue
        ratio = (
            base.median_ms / t.median_ms if base is not None and not isinstance(base, Exception) else math.nan
        )
        rows.append({"shape": f"B{batch} x {seqlen}", "candidate": name, "us": t.median_ms * 1e3,
                     "GB/s": nbytes / t.median_ms / 1e6, "vs_cudnn": ratio, "spread": t.spread,
                     "runs": t.runs, "max_abs_vs_cudnn": checked.get(name)})  # fmt: skip
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
