"""Decode attention on the GPU: bytes of K and V read per second, TL's split-KV kernels (paged and
contiguous KV) beside cuDNN (SDPA's cudnn backend), SDPA's FlashAttention 2, FlashAttention 4 (when it
imports) and, with --flex, FlexAttention, in one process and in the balanced order of
`runner.bench.time_interleaved`.

    python3 benchmarks/decode.py [--shapes 8x32768,1x131072,64x4096] [--ab BN=32 ...]
                                 [--split-factors 0.5,2] [--launch graph|eager] [--flex] [--json OUT.json]

One query row per sequence, GQA 32/8, head dim 128, bf16. The TL kernels are
examples/inference/paged_decode.tl built for sm_90 (the same cp.async + mma.sync kernel as sm_80) with
its 64-token pages in random order, and the same file without `Param page_size` (contiguous KV);
`--ab P=V` adds both rebuilt with Params changed; `--split-factors` adds the base builds launched with
the automatic split count scaled. Every candidate's output is compared with cuDNN's before it is timed
(FA4's and Flex's with the TL kernel's too). Bytes: 2 · batch · seqlen_k · heads_kv · d · 2 (K and V once).

`--launch graph` (the default) times every candidate, baselines included, as one CUDA graph replay, so
the numbers are GPU time (what a serving loop that captures its decode step sees); `--launch eager`
times the Python calls as they are, host overhead included. FA4: `flash_attn.cute` (flash-attn-4), with
`num_splits=0` (its heuristic; sm_90 has no split-KV and refuses more than one, so 1 is the fallback) and,
paged, `flash_attn_varlen_func(..., page_table=, seqused_k=)`; benchmarks/run_on_device.sh or
inference_on_device.sh put it on the path (TL_FA4_SITE). Missing, it is skipped with a message.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HEADS, HEADS_KV, D, PAGE = 32, 8, 128, 64
BASELINES = ("cudnn", "sdpa-fa2", "fa4", "fa4-paged", "flex")


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
    ap.add_argument("--split-factors", default="", help="F,F: base builds at round(auto splits · F)")
    ap.add_argument("--launch", choices=("graph", "eager"), default="graph")
    ap.add_argument("--flex", action="store_true", help="also time FlexAttention (compiles per shape)")
    ap.add_argument("--no-fa4", action="store_true", help="skip FlashAttention 4 even when it imports")
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
    only = {c for c in args.candidates.split(",") if c}
    builds = []
    for label, ab in configs:
        for page in (True, False):
            name = f"tl-{'paged' if page else 'contig'}{' ' + label if label else ''}"
            if only and not any(c == name or c.startswith(name + " s") for c in only):
                continue
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
    factors = [float(f) for f in args.split_factors.split(",") if f]
    fa4 = None if args.no_fa4 else fa4_functions()

    gpu = torch.cuda.get_device_name()
    meta = {"gpu": gpu, "date": time.strftime("%Y-%m-%d"), "launch": args.launch, "argv": sys.argv[1:]}
    rows: list[dict] = []
    for shape in args.shapes.split(","):
        batch, seqlen = (int(x) for x in shape.split("x"))
        shape_rows = bench_shape(
            batch, seqlen, kernels, factors=factors, fa4=fa4, flex=args.flex, launch=args.launch,
            target_s=args.target_s, only=only,
        )  # fmt: skip
        for r in shape_rows:  # as soon as a shape is done: a step cut short by its time limit keeps them
            print(f"  {table_line(r)}", flush=True)
        rows += shape_rows
        if args.json:
            Path(args.json).write_text(json.dumps({**meta, "rows": rows}, indent=1))
        torch.cuda.empty_cache()

    print(f"\nDecode, GQA {HEADS}/{HEADS_KV}, d {D}, bf16, seqlen_q 1, {gpu}, {time.strftime('%Y-%m-%d')}, "
          f"{args.launch} launches")  # fmt: skip
    print(f"{'shape':14s} {'candidate':28s} {'us':>9s} {'GB/s (K+V)':>11s} {'x cuDNN':>8s} {'spread':>7s}")
    for r in rows:
        print(table_line(r))
    return 0


def table_line(r: dict) -> str:
    return (f"{r['shape']:14s} {r['candidate']:28s} {r['us']:9.1f} {r['GB/s']:11.0f} {r['vs_cudnn']:8.3f} "
            f"{r['spread']:7.3f}")  # fmt: skip


def fa4_functions() -> tuple[Callable[..., Any], Callable[..., Any] | None] | None:
    """(flash_attn_func, flash_attn_varlen_func or None) from flash-attn-4, or None with a message."""
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as exc:  # not installed, or its DSL runtime missing: the column is skipped
        print(f"fa4: skipped ({type(exc).__name__}: {str(exc)[:160]})", flush=True)
        return None
    try:
        from flash_attn.cute import flash_attn_varlen_func
    except ImportError:
        flash_attn_varlen_func = None
    return flash_attn_func, flash_attn_varlen_func


def graphed(fn: Callable[[int], Any]) -> Callable[[int], Any]:
    """`fn` captured once into a CUDA graph (after a warm-up run on a side stream, as torch asks); the
    returned callable replays it and returns the captured output."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(0)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(0)

    def replay(i: int) -> Any:
        graph.replay()
        return out

    replay.graph = graph  # type: ignore[attr-defined]  # kept alive with the callable
    return replay


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, tuple) else out


def bench_shape(
    batch: int,
    seqlen: int,
    kernels: dict,
    *,
    factors: list[float],
    fa4: tuple | None,
    flex: bool,
    launch: str,
    target_s: float,
    only: set[str],
) -> list[dict]:
    """Check, then time every candidate on one shape; a row per candidate that ran."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from runner.bench import time_interleaved
    from runner.decode import auto_splits, decode_attention
    from runner.launch import sm_count

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
    kc, vc = kb.transpose(1, 2), vb.transpose(1, 2)  # (batch, seqlen, heads_kv, d) views of SDPA's
    if fa4 is None:
        del k, v
    fns: dict[str, Callable[[int], Any]] = {}
    splits: dict[str, int] = {}
    sms = sm_count(torch.cuda.current_device())
    for name, (page, loaded) in kernels.items():
        kv = {"block_table": table, "cache_seqlens": lens} if page else {}
        kk, vv = (kp, vp) if page else (kc, vc)
        auto = auto_splits(loaded.spec, batch, 1, HEADS, HEADS_KV, seqlen, sms)
        splits[name] = auto
        fns[name] = lambda i, L=loaded, kk=kk, vv=vv, kv=kv: decode_attention(L, q, kk, vv, **kv)
        if " " in name:
            continue  # the split factors apply to the base builds
        for f in factors:
            s = max(1, min(128, round(auto * f)))
            label = f"{name} s={s}"
            if s != auto and label not in fns:
                splits[label] = s
                fns[label] = lambda i, L=loaded, kk=kk, vv=vv, kv=kv, s=s: decode_attention(
                    L, q, kk, vv, num_splits=s, **kv
                )

    def sdpa(backend: Any) -> Callable[[int], Any]:
        def run(i: int) -> Any:
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qb, kb, vb, enable_gqa=True)

        return run

    fns["cudnn"] = sdpa(SDPBackend.CUDNN_ATTENTION)
    fns["sdpa-fa2"] = sdpa(SDPBackend.FLASH_ATTENTION)
    notes: dict[str, str] = {}
    if fa4 is not None:
        fa4_func, fa4_varlen = fa4
        for ns in (0, 1):  # its heuristic first; sm_90 asserts on more than one split
            try:
                torch.cuda.synchronize()
                fa4_func(q, k, v, num_splits=ns)
                torch.cuda.synchronize()
                fns["fa4"] = lambda i, ns=ns: fa4_func(q, k, v, num_splits=ns)
                notes["fa4"] = f"num_splits={ns}"
                break
            except Exception as exc:  # the next setting, or the reason it cannot run
                notes["fa4"] = f"{type(exc).__name__}: {str(exc)[:160]}"
        if fa4_varlen is not None:
            paged_kw = {"page_table": table, "seqused_k": lens, "num_splits": 1}
            try:
                fa4_varlen(q, kp, vp, **paged_kw)
                fns["fa4-paged"] = lambda i: fa4_varlen(q, kp, vp, **paged_kw)
            except Exception as exc:
                notes["fa4-paged"] = f"{type(exc).__name__}: {str(exc)[:160]}"
        for name, note in notes.items():
            print(f"  {name}: {note}", flush=True)
    if flex:
        from torch.nn.attention.flex_attention import flex_attention

        compiled = torch.compile(flex_attention, dynamic=False)
        fns["flex"] = lambda i: compiled(qb, kb, vb, enable_gqa=True)
    ref = fns["cudnn"](0).transpose(1, 2).float()
    if only:
        fns = {name: fn for name, fn in fns.items() if name in only}
    tl_ref = None
    checked: dict[str, dict[str, float]] = {}
    for name, fn in list(fns.items()):
        try:
            out = _first(fn(0))
            if name in ("cudnn", "sdpa-fa2", "flex"):
                out = out.transpose(1, 2)
            out = out.float()
            err = float((out - ref).abs().max())
            checked[name] = {"max_abs_vs_cudnn": err}
            if tl_ref is None and name.startswith("tl-") and err < 2e-2:
                tl_ref = out
            if tl_ref is not None and name in BASELINES:
                checked[name]["max_abs_vs_tl"] = tl_err = float((out - tl_ref).abs().max())
                if name != "cudnn" and not tl_err < 2e-2:  # the other baselines must agree with TL too
                    err = max(err, tl_err)
            if not err < 2e-2:
                print(f"  {name}: differs from cuDNN or the TL kernel by {err:.3e}; not timed", flush=True)
                del fns[name]
        except Exception as exc:  # a baseline that cannot run this shape is reported, not fatal
            print(f"  {name}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            del fns[name]
    if launch == "graph":
        for name in list(fns):
            try:
                fns[name] = graphed(fns[name])
            except Exception as exc:  # not capturable: timed eagerly, and its row says so in its name
                print(f"  {name}: CUDA graph capture failed ({type(exc).__name__}: {str(exc)[:160]})")
                torch.cuda.synchronize()
                fns[f"{name} (eager)"] = fns.pop(name)
    print(f"B{batch} x {seqlen}: timing {', '.join(fns)} ({launch})", flush=True)
    times = time_interleaved(fns, target_s=target_s, warmup_s=0.05)
    base = times.get("cudnn", times.get("cudnn (eager)"))
    rows = []
    for name, t in times.items():
        if isinstance(t, Exception):
            print(f"  {name}: {type(t).__name__}: {t}", flush=True)
            continue
        ratio = (
            base.median_ms / t.median_ms if base is not None and not isinstance(base, Exception) else math.nan
        )
        mode = "eager" if name.endswith("(eager)") else launch
        rows.append({"shape": f"B{batch} x {seqlen}", "candidate": name, "us": t.median_ms * 1e3,
                     "GB/s": nbytes / t.median_ms / 1e6, "vs_cudnn": ratio, "spread": t.spread,
                     "runs": t.runs, "launch": mode, "splits": splits.get(name), "note": notes.get(name),
                     **checked.get(name, {})})  # fmt: skip
    return rows + auto_rows(rows, kernels, batch, sms)


def auto_rows(rows: list[dict], kernels: dict, batch: int, sms: int) -> list[dict]:
    """`tl-paged auto` / `tl-contig auto`: the row of the build `runner.decode.preferred_block_n` picks
    for this shape (what `build_inference(..., block_n="auto")` runs), a copy of that measurement."""
    from runner.decode import preferred_block_n

    by_name = {r["candidate"]: r for r in rows}
    out = []
    for kind in ("paged", "contig"):
        base = kernels.get(f"tl-{kind}")
        if base is None:
            continue
        bn = preferred_block_n(base[1].spec, batch, 1, HEADS, HEADS_KV, sms)
        chosen = by_name.get(f"tl-{kind}" if bn == base[1].spec.block_n else f"tl-{kind} BN={bn}")
        if chosen is not None:
            out.append(
                {**chosen, "candidate": f"tl-{kind} auto (BN {bn})", "same_run_as": chosen["candidate"]}
            )
    return out


if __name__ == "__main__":
    raise SystemExit(main())
