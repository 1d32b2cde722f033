"""Catalogue variants' derived backward against FlexAttention's backward (and FA4's, where FA4 runs the
variant natively: softcap, sliding window, learnable sink), one process, balanced order; TFLOPS on the
pairs the masks keep, the backward counted as 2.5× the forward's FLOPs (issue 18's third target).

    python3 benchmarks/variants_backward.py [--seqlens 4096,16384] [--only a,b] [--json OUT]
        [--ab 'overlap_p=1;dq_bulk=1'] [--baselines flex,fa4 | --baselines '']

Every catalogue file is set to sm_90, bf16, d 128 (`variant_cases.for_shape`), so the backward is the
wgmma skeleton. Its forward gives O and LSE; side tensors are random (`variant_cases.side_tensors`) and
not learnable here (FlexAttention's captured tensors get no gradient either). Before anything is timed,
TL's dq, dk, dv must agree with FlexAttention's autograd gradients of the same score_mod / mask_mod on
the same inputs (max |difference| ≤ 2e-2 · max |Flex's|, per gradient; `backward.grad_check`), and FA4's
with TL's; a candidate that disagrees is reported and not timed. The baselines' backward is
`torch.autograd.grad` of a retained forward graph (their backward kernels only); FlexAttention's block
mask is built outside the timed region. Programs whose masks read side tensors are timed twice: `tl`
classifies the backward's blocks in every call, `tl-once` with them built once outside the timing
(`BackwardBuild.block_classes`, the comparison Flex's column makes), checked against `tl`'s gradients.
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

from benchmarks.backward import grad_check  # noqa: E402  (after the path insert)
from benchmarks.variant_cases import (  # noqa: E402
    allow_recompiles,
    catalogue,
    fa4_available,
    fa4_native,
    flex_mods,
    for_shape,
    kept_pairs,
    side_tensors,
    tl_path,
)

HEADS = 16
HEAD_DIM = 128
TOKENS = 16384
AB = ":ab"  # the key suffix of `--ab`'s backwards: name + AB + i for option set i (candidate tl_ab<i>)


def build(
    names: list[str], ab: list[dict[str, Any]] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The forward and the backward of every variant, compiled in one parallel batch: ({name: loaded
    forward}, {name: BackwardBuild}); a variant whose backward cannot be derived or compiled is left out
    with a note. `ab`: option sets of the sm90 generator, one more backward each, under the key
    `name + AB + i` (i from 1)."""
    from pipeline.backward import BackwardBuildError, translate_backward
    from pipeline.build import translate_text
    from runner.compile import CompileError, CompileJob, compile_many
    from runner.launch import cuda_device_arch, load

    device = cuda_device_arch()
    fwd, bwd, jobs = {}, {}, []
    for n in names:
        text = for_shape(tl_path(n).read_text(), "bf16", HEAD_DIM)
        try:
            b = translate_backward(text, dtype="bf16", learnable=())
        except BackwardBuildError as exc:
            print(f"{n}: no backward ({str(exc)[:160]})", flush=True)
            continue
        f = translate_text(text, Path(f"{n}_bwd_bench.tl"))
        fwd[n], bwd[n] = f, b
        jobs.append(
            (n, "fwd", CompileJob(source=f.source, arch=f.spec.arch, name=f"{n}.cu", device_arch=device))
        )
        jobs.append(
            (n, "bwd", CompileJob(source=b.source, arch=b.spec.arch, name=f"{n}.bwd.cu", device_arch=device))
        )
        for i, options in enumerate(ab or (), 1):
            try:
                b2 = translate_backward(text, dtype="bf16", learnable=(), skeleton="sm90", options=options)
            except BackwardBuildError as exc:
                print(f"{n}: no A/B backward {options} ({str(exc)[:160]})", flush=True)
                continue
            key = f"{n}{AB}{i}"
            bwd[key] = b2
            name = f"{n}.ab{i}.bwd.cu"
            job = CompileJob(source=b2.source, arch=b2.spec.arch, name=name, device_arch=device)
            jobs.append((key, "bwd", job))
    loaded: dict[str, Any] = {}
    builds: dict[str, Any] = {}
    for (n, kind, _), c in zip(jobs, compile_many([j for _, _, j in jobs], isolated=True), strict=True):
        if isinstance(c, CompileError):
            print(f"{n}: {kind} compile failed: {str(c)[:200]}", flush=True)
            loaded.pop(n, None)
            builds.pop(n, None)
            continue
        if kind == "fwd":
            loaded[n] = load(c, fwd[n].spec)
        else:
            bwd[n].compiled = c
            builds[n] = bwd[n]
    both = set(loaded) & set(builds)
    return {n: loaded[n] for n in both}, {n: builds[n] for n in builds if n.split(AB)[0] in both}


def _autograd_bwd(fwd: Any, leaves: list[Any], grad_out: Any) -> Any:
    """`i -> grads` of a retained forward graph: only the backward's kernels run when timed."""
    import torch

    out = fwd()
    out = out[0] if isinstance(out, tuple) else out

    def bwd_only(i: int) -> Any:
        return torch.autograd.grad(out, leaves, grad_out, retain_graph=True)

    bwd_only(0)
    return bwd_only


def _add_checked(
    label: str,
    fwd: Any,
    leaves: list[Any],
    grad_out: Any,
    as_bshd: Any,
    tl_grads: Any,
    fns: dict[str, Any],
    notes: dict[str, Any],
) -> None:
    """A baseline's backward into `fns` when its dq, dk, dv (`as_bshd` puts them in TL's layout) agree
    with TL's; otherwise `notes[label]` says why it is not timed (a mod it cannot compile, a mismatch)."""
    try:
        fn = _autograd_bwd(fwd, leaves, grad_out)
        check = grad_check(tl_grads, as_bshd(fn(0)))
    except Exception as exc:  # reported, not timed
        notes[label] = f"n/a: {type(exc).__name__}: {str(exc)[:120]}"
        return
    notes[f"tl_vs_{label}"] = check
    if check["ok"]:
        fns[label] = fn
    else:
        notes[label] = f"not timed: its gradients disagree with TL's ({label})"


def one_shape(
    names: list[str],
    loaded: dict[str, Any],
    builds: dict[str, Any],
    S: int,
    target_s: float,
    baselines: tuple[str, ...] = ("flex", "fa4"),
) -> list[dict[str, Any]]:
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from kernel_ir.program import Forward
    from runner.abi import block_mask_kind
    from runner.bench import time_interleaved
    from runner.launch import launch

    B, H, D = max(1, TOKENS // S), HEADS, HEAD_DIM
    scale = 1 / math.sqrt(D)
    g = torch.Generator(device="cuda").manual_seed(S)
    q, k, v, do = (torch.randn(B, S, H, D, device="cuda", generator=g).to(torch.bfloat16) for _ in range(4))
    flex = torch.compile(flex_attention, dynamic=False)
    rows = []
    for n in names:
        if n not in loaded:
            continue
        spec = loaded[n].spec
        program = Forward.from_dict(spec.program) if spec.program else None
        gv = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{n}:{S}".encode()))  # as variants.py
        side = side_tensors(program, B, H, H, S, gv)
        scalars = {s.name: s.default for s in program.scalars} if program else {}
        o = torch.empty_like(q)
        lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
        launch(loaded[n], q, k, v, o, lse, extras=side)
        build = builds[n]

        def tl(i: int, build: Any = build, o: Any = o, lse: Any = lse, side: Any = side) -> Any:
            return build.run(q, k, v, o, lse, do, scale=scale, extras=side)

        tl_grads = tl(0)[:3]
        fns: dict[str, Any] = {"tl": tl}
        notes: dict[str, Any] = {}
        if block_mask_kind(spec.program):
            # the backward's block classes built once, outside the timing, as Flex's block mask is
            classes = build.block_classes(q, k, extras=side)

            def tl_once(i: int, build: Any = build, o: Any = o, lse: Any = lse, side: Any = side,
                        c: Any = classes) -> Any:  # fmt: skip
                return build.run(q, k, v, o, lse, do, scale=scale, extras=side, block_classes=c)

            check = grad_check(tl_grads, tl_once(0)[:3])
            notes["tl-once_vs_tl"] = check
            if check["ok"]:
                fns["tl-once"] = tl_once
            else:
                notes["tl-once"] = "not timed: its gradients disagree with tl's"
        for key in sorted(x for x in builds if x.startswith(n + AB)):
            cand = "tl_ab" + key.split(AB)[1]

            def tl_ab(i: int, ab: Any = builds[key], o: Any = o, lse: Any = lse, side: Any = side) -> Any:
                return ab.run(q, k, v, o, lse, do, scale=scale, extras=side)

            check = grad_check(tl_grads, tl_ab(0)[:3])
            notes[f"{cand}_vs_tl"] = check
            if check["ok"]:
                fns[cand] = tl_ab
            else:
                notes[cand] = "not timed: its gradients disagree with tl's"
        mods = flex_mods(n, scalars, side, S, S) if "flex" in baselines else None
        if mods is not None:
            score_mod, mask_mod = mods
            block_mask = create_block_mask(mask_mod, B, None, S, S, device=q.device) if mask_mod else None
            leaves = [t.detach().transpose(1, 2).requires_grad_(True) for t in (q, k, v)]
            _add_checked(
                "flex",
                lambda leaves=leaves, sm=score_mod, bm=block_mask: flex(
                    *leaves, score_mod=sm, block_mask=bm, scale=scale
                ),
                leaves,
                do.transpose(1, 2),
                lambda grads: [x.transpose(1, 2) for x in grads],
                tl_grads,
                fns,
                notes,
            )
        fa4_kw = fa4_native(n, scalars, side) if "fa4" in baselines else None
        if fa4_kw is not None and fa4_available():
            from flash_attn.cute import flash_attn_func

            leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
            _add_checked(
                "fa4",
                lambda leaves=leaves, kw=fa4_kw: flash_attn_func(*leaves, softmax_scale=scale, **kw),
                leaves,
                do,
                lambda grads: list(grads),
                tl_grads,
                fns,
                notes,
            )
        flops = 2.5 * 4 * kept_pairs(program, q, k, side) * D
        timings = time_interleaved(fns, target_s=target_s, warmup_s=0.2)
        row: dict[str, Any] = {"variant": n, "batch": B, "seqlen": S, **notes}
        for cand, tm in timings.items():
            row[cand] = None if isinstance(tm, Exception) else round(flops / (tm.median_ms / 1e3) / 1e12, 1)
        for cand in [c for c in fns if c.startswith("tl")]:
            for base in ("flex", "fa4", "tl"):
                if cand != base and row.get(cand) and row.get(base):
                    row[f"{cand}/{base}"] = round(row[cand] / row[base], 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seqlens", default="4096,16384")
    ap.add_argument("--only", default="", help="comma-separated catalogue names (default: all)")
    ap.add_argument("--target-s", type=float, default=0.5)
    ap.add_argument("--json", default="")
    ap.add_argument(
        "--ab",
        default="",
        help="KEY=INT,…[;KEY=INT,…]: option sets of the sm90 backward generator, one more TL candidate "
        "each, tl_ab1, tl_ab2, … (e.g. 'producer=1;producer=1,key_major=1'); each one's gradients must agree "
        "with tl's before it is timed",
    )
    ap.add_argument(
        "--baselines",
        default="flex,fa4",
        help="comma-separated, of flex and fa4 ('' for none: an A/B of TL builds alone, without Flex's "
        "compile per variant and shape)",
    )
    args = ap.parse_args(argv)
    import torch

    baselines = tuple(b for b in args.baselines.split(",") if b)
    names = [n for n in catalogue() if not args.only or n in args.only.split(",")]
    allow_recompiles()
    ab = [
        {k: int(v) for k, _, v in (x.partition("=") for x in group.split(",") if x)}
        for group in args.ab.split(";")
        if group
    ]
    loaded, builds = build(names, ab)
    rows = []
    for S in [int(s) for s in args.seqlens.split(",") if s]:
        rows += one_shape(names, loaded, builds, S, args.target_s, baselines)
    gpu = torch.cuda.get_device_name()
    print(f"\nbackward TFLOPS on kept pairs (2.5x forward FLOPs), bf16 d{HEAD_DIM} H{HEADS}, sm_90, {gpu}, "
          f"{time.strftime('%Y-%m-%d')}")  # fmt: skip
    cols, rcols = ("tl", "flex", "fa4"), ("tl/flex", "tl/fa4")
    for i, options in enumerate(ab, 1):
        print(f"tl_ab{i}: the sm90 backward with {options}")
        cols += (f"tl_ab{i}",)
        rcols += (f"tl_ab{i}/tl", f"tl_ab{i}/flex", f"tl_ab{i}/fa4")
    print(f"{'variant':26s} {'B×S':>6s} " + " ".join(f"{c:>7s}" for c in cols) + " "
          + " ".join(f"{c:>8s}" for c in rcols))  # fmt: skip
    for r in rows:
        cells = [f"{r[c]:7.1f}" if r.get(c) else f"{'—':>7s}" for c in cols]
        ratios = [f"{r[c]:8.2f}" if r.get(c) else f"{'—':>8s}" for c in rcols]
        print(
            f"{r['variant']:26s} {r['batch']}×{r['seqlen'] // 1024}k "
            + " ".join(cells)
            + " "
            + " ".join(ratios)
        )
    if args.json:
        meta = {"gpu": gpu, "date": time.strftime("%Y-%m-%d"), "heads": HEADS, "head_dim": HEAD_DIM}
        Path(args.json).write_text(json.dumps({**meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
