"""Catalogue variants on the sm_90 path against FlexAttention and FA4, one process, balanced order; TFLOPS
on the (query, key) pairs the masks keep. Every TL kernel is verified against its IR reference first;
each baseline is checked against the verified TL kernel's output before it is timed.

FA4 runs a variant two ways where it can: `fa4`, its native arguments (causal, window_size, softcap,
learnable_sink), and `fa4-mod`, the FlexAttention score_mod / mask_mod lowered to FA4's CuTe DSL kernel
(`flex_attention(..., kernel_options={"BACKEND": "FLASH"})`, block-sparse through its block mask). tl/FA4
is taken against the faster of the two.

Programs whose masks read side tensors (documents, global flags) classify their blocks at every launch
(`tl`, what a bare `launch` costs) and, in the row `classes once`, with the classes built once outside the
timed launches (`runner.launch.block_classes`, as Flex's and FA4's block masks are built, and as a model
reuses them across its layers), and in `torch call, kept` through `tl_attention` as a model calls it
(no `block_mask=`: the kernel keeps the classes of its first call, `tl_attention.mask_cache`); both
outputs are checked equal to the per-launch one before they are timed.

    python3 benchmarks/variants.py [--seqlen 8192] [--batch 2] [--heads 16] [--only a,b] [--json OUT]
                                   [--seqlens 4096,8192,16384 [--tokens 16384]] [--dtype fp16]
                                   [--hdim 64] [--heads 64 --heads-kv 8]
                                   [--ab fma_exps=0,3,6]

`--ab "PARAM=V1,V2;VARIANT:PARAM2=V3"`: each variant (or only VARIANT) is also built with `Param PARAM = V`
for every value (set or replaced in its TL), verified, and timed in the same interleaved run as
`tl PARAM=V` (A/Bs of one switch at a time); `BM=V` sets `consumers` to V / 64 with it (e.g. the d 64
plain kernel's 192 rows on three consumer warp groups).

The TL kernels are the catalogue files as written (Target set to sm_90, bf16): their tiles are the
catalogue's, not tuned per variant (that is issue 17's planner work).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.variant_cases import (  # noqa: E402  (after the path insert)
    allow_recompiles,
    catalogue,
    fa4_available,
    fa4_native,
    flex_calls,
    flex_mods,
    for_shape,
    kept_pairs,
    plain_texts,
    side_tensors,
    with_param,
)


def _checked(
    label: str, n: str, fn: Any, ref: Any, notes: dict[str, Any], fns: dict[str, Any], bhsd: bool = False
) -> None:
    """Run baseline `fn` once; time it (into `fns`) only when it agrees with the verified TL output
    (`ref`, (B, S, H, D); `bhsd`: the baseline answers (B, H, S, D), as FlexAttention does)."""
    try:
        out = fn(0)
    except Exception as exc:  # a baseline that cannot run this variant is a note in the row, not a crash
        notes[label] = f"n/a: {type(exc).__name__}: {str(exc)[:160]}"
        return
    out = (out[0] if isinstance(out, tuple) else out).float()
    if bhsd:
        out = out.transpose(1, 2)
    err = float((out - ref).abs().max())
    notes[f"{label}_max_abs_vs_tl"] = err
    if err < 5e-2:
        fns[label] = fn
    else:
        print(f"{n}: {label} disagrees with the verified TL kernel (max abs {err:.3e}); not timed")


def _best_fa4(r: dict[str, Any]) -> None:
    """`fa4-best`: the faster of FA4's native path and its score_mod / mask_mod path (the stronger
    baseline is the one the tl/FA4 target is held to)."""
    got = [r[c] for c in ("fa4", "fa4-mod") if isinstance(r.get(c), float)]
    if got:
        r["fa4-best"] = max(got)


def _num(r: dict[str, Any], key: str) -> str:
    return f"{r[key]:6.0f}" if isinstance(r.get(key), float) else f"{'—':>6s}"


def _ratio(r: dict[str, Any], key: str, tl: str = "tl") -> str:
    ok = isinstance(r.get(key), float) and isinstance(r.get(tl), float)
    return f"{r[tl] / r[key]:7.2f}" if ok else f"{'—':>7s}"


def _bench_shape(
    args: Any,
    names: list[str],
    ab: list[tuple[str, str, str]],
    loaded: dict[str, Any],
    built: dict[str, Any],
    failed: set[str],
    B: int,
    S: int,
    H: int,
    D: int,
    dtype: Any,
) -> list[dict[str, Any]]:
    """One (batch, seqlen): every variant that passed verification (`failed`: the builds that did not)
    timed beside the plain kernel, FlexAttention and FA4 (native), balanced order; a row per variant."""
    import torch

    from kernel_ir.program import Forward
    from runner.abi import block_mask_kind
    from runner.bench import time_interleaved
    from runner.launch import block_classes, launch

    rows: list[dict[str, Any]] = []
    g = torch.Generator(device="cuda").manual_seed(0)
    hkv = args.heads_kv or H
    gqa = hkv != H
    q = torch.randn(B, S, H, D, device="cuda", generator=g).to(dtype)
    k, v = (torch.randn(B, S, hkv, D, device="cuda", generator=g).to(dtype) for _ in range(2))
    scale = 1 / math.sqrt(D)
    for n in names:
        if n not in loaded:
            continue
        lk, spec = loaded[n], built[n].spec
        program = Forward.from_dict(spec.program) if spec.program else None
        if n in failed:
            rows.append({"variant": n, "batch": B, "seqlen": S, "error": "verification failed"})
            continue
        # each variant's side tensors from its own seed: a run of a few variants (`--only`) draws the
        # same documents, prefixes and flags as the whole catalogue's
        gv = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{n}:{S}".encode()))
        side = side_tensors(program, B, H, hkv, S, gv)
        scalars = {s.name: s.default for s in program.scalars} if program else {}
        o = torch.empty_like(q)
        lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
        pairs = kept_pairs(program, q, k, side)
        flops = 4 * pairs * D
        causal = bool(program.masks)
        plain = loaded["plain_causal" if causal else "plain_none"]
        po = torch.empty_like(q)
        plse = torch.empty_like(lse)
        plain_pairs = B * H * (S * (S + 1) / 2 if causal else S * S)
        fns = {
            "tl": lambda i, lk=lk, o=o, lse=lse, side=side: launch(lk, q, k, v, o, lse, extras=side),
            "tl-plain": lambda i, plain=plain, po=po, plse=plse: launch(plain, q, k, v, po, plse),
        }
        for _, param, value in ab:
            key = f"{n} {param}={value}"
            if key not in loaded or key in failed:
                continue
            out = (torch.empty_like(q), torch.empty_like(lse))
            fns[f"tl {param}={value}"] = lambda i, lk=loaded[key], out=out, side=side: launch(
                lk, q, k, v, *out, extras=side
            )
        launch(lk, q, k, v, o, lse, extras=side)
        ref_o = o.float()
        if block_mask_kind(spec.program):
            # the block classes built once, outside the timed launches, as FlexAttention's block mask is
            # (and as a model reuses them across its layers): `tl-once`, checked equal to `tl` first
            classes = block_classes(lk, q, k, v, extras=side)
            out = (torch.empty_like(q), torch.empty_like(lse))
            launch(lk, q, k, v, *out, extras=side, block_classes=classes)
            if torch.equal(out[0], o):
                fns["tl-once"] = lambda i, lk=lk, out=out, side=side, c=classes: launch(
                    lk, q, k, v, *out, extras=side, block_classes=c
                )
            else:
                print(f"{n}: the launch with prebuilt block classes differs from the plain launch, not timed")
            _torch_call(n, built[n].text, q, k, v, o, side, scalars, fns)
        mods = flex_mods(n, scalars, side, S, S)
        fa4_kw = fa4_native(n, scalars, side)
        notes: dict[str, Any] = {}
        if mods is not None:
            call = flex_calls(mods, q, k, v, scale=scale, gqa=gqa)
            # "flex": FlexAttention's Triton kernel; "fa4-mod": the same mods through FA4's score_mod /
            # mask_mod / block-sparse interface (FlexAttention's FLASH backend lowers them to CuTe DSL)
            # (only where FA4 has no native path for the variant: one FA4 compile per variant)
            for label, options in (("flex", None), ("fa4-mod", {"BACKEND": "FLASH"})):
                if label == "fa4-mod" and fa4_kw is not None:
                    continue
                if label == "fa4-mod" and not fa4_available():
                    notes[label] = "n/a: flash_attn.cute does not import"
                    continue
                _checked(label, n, call(options), ref_o, notes, fns, bhsd=True)
        if fa4_kw is not None and fa4_available():
            from flash_attn.cute import flash_attn_func

            fn = lambda i, kw=fa4_kw: flash_attn_func(q, k, v, softmax_scale=scale, **kw)  # noqa: E731
            _checked("fa4", n, fn, ref_o, notes, fns)
        elif fa4_kw is not None:
            notes["fa4"] = "n/a: flash_attn.cute does not import"
        timings = time_interleaved(fns, target_s=args.target_s, warmup_s=0.1)
        row = {"variant": n, "batch": B, "seqlen": S, "useful_pairs": pairs / (B * H * S * S), **notes}
        for cand, tm in timings.items():
            if isinstance(tm, Exception):
                row[cand] = f"error: {tm}"[:200]
                continue
            f = 4 * plain_pairs * D if cand == "tl-plain" else flops
            row[cand] = round(f / (tm.median_ms / 1e3) / 1e12, 1)
        _best_fa4(row)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _torch_call(
    n: str, text: str, q: Any, k: Any, v: Any, o: Any, side: dict[str, Any], scalars: dict, fns: dict
) -> None:
    """`tl-call`: the same kernel called as a model calls it (`tl_attention`, no `block_mask=`), so its
    classes are built at the first call and kept while the side tensors are unchanged
    (`tl_attention.mask_cache`); the argument checks and the cache's lookup are in the time. Checked
    equal to the per-launch output first."""
    import torch

    import tl_attention

    kernel = tl_attention.compile(text, name=f"{n.replace(' ', '_')}_bench.tl")  # the timed build's source

    def call(i: int) -> Any:
        with torch.no_grad():
            return kernel(q, k, v, layout="bshd", scale=1 / math.sqrt(q.shape[-1]), **side, **scalars)

    if torch.equal(call(0), o):
        fns["tl-call"] = call
    else:
        print(f"{n}: the PyTorch call differs from the plain launch, not timed")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument(
        "--seqlens", default="", help="e.g. 4096,8192,16384: each at --tokens tokens (B = tokens/S)"
    )
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--hdim", type=int, default=128, help="head dim (the catalogue's Param d is replaced)")
    ap.add_argument("--heads-kv", type=int, default=0, help="K/V heads (GQA); 0: as many as --heads")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument(
        "--only",
        default="all",
        help="variants (examples/variants/NAME.tl), comma-separated; all: the whole catalogue",
    )
    ap.add_argument("--json", default="")
    ap.add_argument("--target-s", type=float, default=0.6)
    ap.add_argument("--ab", default="", help="[VARIANT:]PARAM=V1,V2[;...]: also built with each value")
    args = ap.parse_args(argv)
    ab = []  # (the one variant it applies to, or "" for all; param; value)
    for group in filter(None, args.ab.split(";")):
        ab_param, _, ab_values = group.partition("=")
        only, _, ab_param = ab_param.strip().rpartition(":")
        ab += [(only, ab_param, v.strip()) for v in ab_values.split(",") if v.strip()]

    import torch

    from pipeline.build import translate_text
    from runner.compile import CompileError, CompileJob, compile_many

    allow_recompiles()
    from runner.launch import cuda_device_arch, load
    from runner.verify import Shape, verify

    names = catalogue() if args.only == "all" else [n for n in args.only.split(",") if n]
    texts = {n: (ROOT / "examples" / "variants" / f"{n}.tl").read_text() for n in names}
    texts.update(plain_texts(args.hdim))
    texts = {n: for_shape(t, args.dtype, args.hdim) for n, t in texts.items()}
    for n in names:  # the A/B values replace the shaped file's (for_shape's own picks included)
        for only, param, value in ab:
            if only in ("", n):
                text = with_param(texts[n], param, value)
                if param == "BM":  # sm_90: one consumer warp group per 64 query rows, as the files set it
                    text = with_param(text, "consumers", str(int(value) // 64))
                texts[f"{n} {param}={value}"] = text
    built = {n: translate_text(t, Path(f"{n.replace(' ', '_')}_bench.tl")) for n, t in texts.items()}
    device = cuda_device_arch()
    results = compile_many(
        [
            CompileJob(source=b.source, arch=b.spec.arch, name=b.cu_path.name, device_arch=device)
            for n, b in built.items()
        ]
    )
    loaded = {}
    for (n, b), c in zip(built.items(), results, strict=True):
        if isinstance(c, CompileError):
            print(f"compile failed: {n}: {str(c)[:300]}")
            continue
        loaded[n] = load(c, b.spec)
    gpu = torch.cuda.get_device_name()
    D, H = args.hdim, args.heads
    hkv = args.heads_kv or H
    failed = set()
    for n, lk in loaded.items():  # once per build: the check's shape does not depend on the timed one
        if n.startswith("plain_"):
            continue
        small = verify(lk, Shape(1, 2 * H // hkv, 2, 1000, 1000), seed=1)
        if not small.passed:
            print(f"{n}: verification failed, not timed\n{small}")
            failed.add(n)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    rows = []
    for S in [int(s) for s in args.seqlens.split(",")] if args.seqlens else [args.seqlen]:
        B = args.tokens // S if args.seqlens else args.batch
        rows += _bench_shape(args, names, ab, loaded, built, failed, B, S, H, D, dtype)
    cols = ("kept", "tl", "plain", "flex", "fa4", "fa4-mod", "tl/flex", "tl/fa4")
    head = f"{'variant':22s} {'B×S':>8s} " + " ".join(
        f"{c:>{7 if '/' in c or '-' in c else 6 if c != 'kept' else 5}s}" for c in cols
    )
    heads = f"H{H}" + (f"/{args.heads_kv}" if args.heads_kv else "")
    day = time.strftime("%Y-%m-%d")
    print(f"\nTFLOPS on kept pairs, {args.dtype} d{D} {heads}, sm_90 path, {gpu}, {day}")
    print(head)
    for r in rows:
        shape = f"{r['batch']}×{r['seqlen'] // 1024}k"
        if "tl" not in r:
            print(f"{r['variant']:22s} {shape:>8s} {r.get('error', '')}")
            continue
        print(
            f"{r['variant']:22s} {shape:>8s} {r['useful_pairs']:5.2f} {_num(r, 'tl')} {_num(r, 'tl-plain')} "
            f"{_num(r, 'flex')} {_num(r, 'fa4')} {_num(r, 'fa4-mod'):>7s} "
            f"{_ratio(r, 'flex')} {_ratio(r, 'fa4-best')}"
        )
        if "tl-once" in r:
            # the comparison Flex's and FA4's columns make: their block masks are built outside the timing
            print(
                f"{'  classes once':22s} {'':8s} {'':5s} {_num(r, 'tl-once')} {'':27s} "
                f"{_ratio(r, 'flex', 'tl-once')} {_ratio(r, 'fa4-best', 'tl-once')}"
            )
        if "tl-call" in r:
            # a model's call: the classes kept by the kernel between calls, the call's checks in the time
            print(
                f"{'  torch call, kept':22s} {'':8s} {'':5s} {_num(r, 'tl-call')} {'':27s} "
                f"{_ratio(r, 'flex', 'tl-call')} {_ratio(r, 'fa4-best', 'tl-call')}"
            )
        for only, param, value in ab:
            if only in ("", r["variant"]):
                print(f"{'  ' + param + '=' + value:22s} {'':8s} {'':5s} {_num(r, f'tl {param}={value}')}")
    if args.json:
        meta = {"gpu": gpu, "dtype": args.dtype, "heads": H, "heads_kv": args.heads_kv or H, "head_dim": D}
        meta["date"] = time.strftime("%Y-%m-%d")
        Path(args.json).write_text(json.dumps({**meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
