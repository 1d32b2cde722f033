"""The derived backward against FlashAttention 4, SDPA flash (FlashAttention 2), SDPA cuDNN and
FlexAttention: backward alone and forward + backward, same process, balanced order
(`runner.bench.time_interleaved`).

    python3 benchmarks/backward.py --prebuilt .cache/bwd --json results.json     # on the H200

bf16, 16k tokens per configuration (batch = 16384 / seqlen), 16 heads, head dims 64 and 128, seqlen 4k,
8k and 16k, causal and not. TFLOPS count the backward as 2.5× the forward's FLOPs (`runner.flops`), the
forward + backward as 3.5×. The baselines' backward is timed as `torch.autograd.grad` of a retained
forward graph, so only their backward kernels run; ours gets O and LSE from SDPA flash's forward (a
softmax's O and LSE are the same whoever computes them). Our forward + backward pairs the TL forward
kernel of the same program with its backward.

`--prebuilt DIR`: the cubins `benchmarks/backward_verify.py --build DIR` wrote (mha_fwd / causal_mha_fwd,
bf16, d 64 and 128) and the forwards `--build-forwards DIR` writes; without it everything compiles here.

FA4 (`fa4`): `flash_attn.cute.flash_attn_func` (flash-attn-4, CuTe DSL) on the (batch, seqlen, heads, d)
tensors, its backward through autograd like the SDPA baselines'. When it does not import the column is
skipped with a note (`--no-fa4` skips it outright). At each shape its dq, dk, dv are first checked against
SDPA flash's on the same inputs (max |difference| ≤ 2e-2 · max |SDPA flash's|, per gradient); one that
disagrees is not timed and the row says why (`fa4_note`). Rows with FA4 carry `<tl column>/fa4` ratios.
Our backwards (`tl`, `tl<suffix>`) pass the same check before they are timed, or are left out, saying so.
`--dims 256` without `--prebuilt` builds the sm_90 files' own default backward (the mma.sync skeleton on
64 × 64 tiles within sm_90's shared memory; the wgmma skeleton covers d 64 and 128).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOKENS = 16384
HEADS = 16
PROGRAMS = {False: "examples/mha_fwd.tl", True: "examples/causal_mha_fwd.tl"}
# FA4's max |dX − SDPA flash's dX| over max |SDPA flash's dX|: two bf16 backwards agree to about one ulp
FA4_REL_TOL = 2e-2


def _tag(causal: bool, d: int) -> str:
    return f"{Path(PROGRAMS[causal]).stem}_bf16_d{d}"


def _forward_text(causal: bool, d: int) -> str:
    text = (ROOT / PROGRAMS[causal]).read_text()
    return text.replace("Param d = 128", f"Param d = {d}").replace("Target sm_90", "Target sm_80")


def build_forwards(out: Path) -> None:
    """The TL forwards the forward + backward column pairs with the backward (sm_80, finalised for sm_90)."""
    import tempfile

    from pipeline.build import translate_file
    from runner.compile import CompileJob, compile_many

    out.mkdir(parents=True, exist_ok=True)
    jobs, tags = [], []
    for causal in (False, True):
        for d in (64, 128):
            with tempfile.TemporaryDirectory() as tmp:
                p = Path(tmp) / Path(PROGRAMS[causal]).name
                p.write_text(_forward_text(causal, d))
                t = translate_file(p)
            tag = _tag(causal, d) + ".fwd"
            (out / f"{tag}.json").write_text(t.spec.to_json())
            jobs.append(CompileJob(source=t.source, arch=t.spec.arch, name=f"{tag}.cu", device_arch="sm_90"))
            tags.append(tag)
    for tag, r in zip(tags, compile_many(jobs), strict=True):
        if isinstance(r, Exception):
            print(f"{tag}: COMPILE FAILED {r}")
        else:
            (out / f"{tag}.cubin").write_bytes(r.code)
            print(f"{tag}: {len(r.code)} bytes")


def _compiled(path: Path, arch: str) -> Any:
    from benchmarks.backward_verify import module_image

    return module_image(path, arch)


def _prebuilt_backward(prebuilt: Path, tag: str) -> Any:
    from runner.abi import BackwardSpec
    from runner.backward import load_backward

    spec = BackwardSpec.from_json(json.dumps(json.loads((prebuilt / f"{tag}.json").read_text())["spec"]))
    return load_backward(_compiled(prebuilt / f"{tag}.cubin", spec.arch), spec)


def _ours(
    prebuilt: Path | None, causal: bool, d: int, suffixes: tuple[str, ...] = ()
) -> tuple[Any, Any, dict[str, Any]]:
    """(loaded backward, loaded forward or None, {"tl" + suffix: loaded backward} for the prebuilt
    `<tag><suffix>` builds there are, e.g. `_det`)."""
    from runner.abi import LaunchSpec
    from runner.launch import load

    tag = _tag(causal, d)
    others = {}
    for suffix in suffixes:
        if prebuilt is not None and (prebuilt / f"{tag}{suffix}.cubin").exists():
            others[f"tl{suffix}"] = _prebuilt_backward(prebuilt, f"{tag}{suffix}")
    if prebuilt is not None and (prebuilt / f"{tag}.cubin").exists():
        bwd = _prebuilt_backward(prebuilt, tag)
    else:
        from pipeline.backward import build_backward

        text = (ROOT / PROGRAMS[causal]).read_text().replace("Param d = 128", f"Param d = {d}")
        # d ≤ 128: the mma.sync skeleton (`--also _sm90` adds the wgmma one); above, the sm_90 file's own
        # default backward (that skeleton within sm_90's shared memory: sm_80's does not hold d 256's tiles)
        if d > 128:
            text = text.replace("Target sm_80", "Target sm_90")
        bwd = build_backward(text, dtype="bf16", arch="sm_80" if d <= 128 else "sm_90").load()
    fwd = None
    if prebuilt is not None and (prebuilt / f"{tag}.fwd.cubin").exists():
        fspec = LaunchSpec.from_json((prebuilt / f"{tag}.fwd.json").read_text())
        fwd = load(_compiled(prebuilt / f"{tag}.fwd.cubin", fspec.arch), fspec)
    return bwd, fwd, others


def _sdpa_lse(q: Any, k: Any, v: Any, causal: bool, scale: float) -> tuple[Any, Any]:
    import torch

    out = torch.ops.aten._scaled_dot_product_flash_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), 0.0, causal, False, scale=scale
    )
    return out[0].transpose(1, 2).contiguous(), out[1].float().contiguous()


def fa4_function() -> Any:
    """flash-attn-4's `flash_attn_func`, or None with a one-line note (the fa4 column is then skipped)."""
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as exc:  # not installed, or its DSL runtime missing
        print(f"fa4: skipped ({type(exc).__name__}: {str(exc)[:160]})", flush=True)
        return None
    return flash_attn_func


def _autograd(
    kind: str, q: Any, k: Any, v: Any, do: Any, causal: bool, scale: float, fa4: Any = None
) -> tuple[Any, Any]:
    """(backward only, forward + backward) callables of a baseline; `kind` "fa4" calls `fa4`
    (`flash_attn_func`) on the (batch, seqlen, heads, d) tensors themselves."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    def layout(t: Any) -> Any:  # SDPA and flex take (batch, heads, seqlen, d), FA4 the tensors as they are
        return t if kind == "fa4" else t.transpose(1, 2)

    leaves = [layout(t.detach()).requires_grad_(True) for t in (q, k, v)]
    dot = layout(do)
    if kind == "fa4":

        def fwd() -> Any:
            out = fa4(*leaves, causal=causal, softmax_scale=scale)
            return out[0] if isinstance(out, tuple) else out  # (out, lse) in some versions
    elif kind == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        s = q.shape[1]
        mask = None
        if causal:
            mask = create_block_mask(
                lambda b, h, i, j: j <= i, B=None, H=None, Q_LEN=s, KV_LEN=s, device=q.device
            )
        for knob in ("cache_size_limit", "recompile_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, max(64, getattr(torch._dynamo.config, knob)))
        compiled = torch.compile(flex_attention, dynamic=False)

        def fwd() -> Any:
            return compiled(*leaves, block_mask=mask, scale=scale)
    else:
        backend = getattr(SDPBackend, kind)

        def fwd() -> Any:
            with sdpa_kernel([backend]):
                return scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale)

    out = fwd()

    def bwd_only(i: int) -> Any:
        return torch.autograd.grad(out, leaves, dot, retain_graph=True)

    def both(i: int) -> Any:
        with torch.enable_grad():
            return torch.autograd.grad(fwd(), leaves, dot)

    bwd_only(0)
    both(0)
    if q.is_cuda:
        torch.cuda.synchronize()
    return bwd_only, both


def grad_check(got: Any, want: Any, rel_tol: float = FA4_REL_TOL) -> dict[str, Any]:
    """dq, dk, dv against a reference's, same layout: per gradient max |got − want|, max |want| and the
    tolerance rel_tol · max |want|; "ok" when every one is within it (a NaN is not)."""
    out: dict[str, Any] = {"ok": True}
    for name, a, b in zip(("dq", "dk", "dv"), got, want, strict=True):
        if tuple(a.shape) != tuple(b.shape):
            out[name] = {"shape": list(a.shape), "ref_shape": list(b.shape)}
            out["ok"] = False
            continue
        diff = (a.float() - b.float()).abs().max().item()
        ref = b.float().abs().max().item()
        ok = diff <= rel_tol * ref  # False for NaN
        out[name] = {"max_abs_diff": diff, "max_abs_ref": ref, "tol": rel_tol * ref}
        out["ok"] = out["ok"] and ok
    return out


def _check_text(check: dict[str, Any]) -> str:
    parts = []
    for name in ("dq", "dk", "dv"):
        c = check.get(name, {})
        if "max_abs_diff" in c:
            parts.append(f"{name} max|diff| {c['max_abs_diff']:.3g} (tol {c['tol']:.3g})")
        elif c:
            parts.append(f"{name} shape {c['shape']} vs {c['ref_shape']}")
    return ", ".join(parts)


def _add_fa4(
    fa4: Any,
    cand_b: dict[str, Any],
    cand_fb: dict[str, Any],
    q: Any,
    k: Any,
    v: Any,
    do: Any,
    causal: bool,
    scale: float,
) -> dict[str, Any]:
    """FA4's backward and forward + backward into `cand_b` / `cand_fb` when its dq, dk, dv agree with the
    SDPA flash candidate's on these inputs. Returns the fields every row of the shape gets: `fa4_check`
    (what the check measured) and, when FA4 is not timed, `fa4` None and `fa4_note` (why)."""
    info: dict[str, Any] = {}
    ref = cand_b.get("sdpa-flash")
    if ref is None:
        note = "not timed: no sdpa-flash gradients to check it against"
    else:
        try:
            bwd_only, both = _autograd("fa4", q, k, v, do, causal, scale, fa4=fa4)
            check = grad_check(bwd_only(0), [g.transpose(1, 2) for g in ref(0)])
        except Exception as exc:
            note = f"{type(exc).__name__}: {str(exc)[:120]}"
        else:
            info["fa4_check"] = check
            verdict = "agree" if check["ok"] else "DISAGREE"
            print(f"  fa4 vs sdpa-flash gradients: {_check_text(check)}: {verdict}", flush=True)
            if check["ok"]:
                cand_b["fa4"], cand_fb["fa4"] = bwd_only, both
                return info
            note = f"not timed: gradients disagree with sdpa-flash ({_check_text(check)})"
    print(f"  fa4: n/a ({note})", flush=True)
    return {**info, "fa4": None, "fa4_note": note}


def _check_ours(cand_b: dict[str, Any], cand_fb: dict[str, Any]) -> None:
    """Drop every tl candidate whose dq, dk, dv disagree with SDPA flash's on these inputs (the tolerance
    FA4's check uses), saying so; print the agreement of the others."""
    ref = cand_b.get("sdpa-flash")
    if ref is None:
        return
    want = [g.transpose(1, 2) for g in ref(0)]
    for name in [n for n in cand_b if n.startswith("tl")]:
        check = grad_check(cand_b[name](0)[:3], want)
        verdict = "agree" if check["ok"] else "DISAGREE: not timed"
        print(f"  {name} vs sdpa-flash gradients: {_check_text(check)}: {verdict}", flush=True)
        if not check["ok"]:
            del cand_b[name]
            cand_fb.pop(name, None)


def run(
    prebuilt: Path | None,
    seqlens: list[int],
    dims: list[int],
    flex: bool,
    json_path: Path | None,
    target_s: float = 1.5,
    suffixes: tuple[str, ...] = ("_det",),
    fa4: bool = True,
) -> None:
    import torch

    fa4_func = fa4_function() if fa4 else None
    rows: list[dict[str, Any]] = []
    gpu = torch.cuda.get_device_name()
    for d in dims:
        for causal in (False, True):
            bwd, fwd, others = _ours(prebuilt, causal, d, suffixes)
            for s in seqlens:
                rows += _one_config(bwd, fwd, others, d, causal, s, flex, target_s, fa4_func)
                torch.cuda.empty_cache()
                if json_path:  # after every shape: a run cut short by a time limit keeps what it timed
                    write_json(json_path, gpu, rows)
    print("\n" + format_table(rows, suffixes, gpu))


def write_json(path: Path, gpu: str, rows: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1))


def _ratio_cell(a: Any, b: Any, width: int) -> str:
    return f"{a / b:.2f}x".rjust(width) if a and b else "n/a".rjust(width)


def format_table(rows: list[dict[str, Any]], suffixes: tuple[str, ...], gpu: str) -> str:
    """The TFLOPS table: one column per candidate, then tl/flash, tl/cudnn and, when any row has FA4 (timed
    or not, `fa4` / `fa4_note`), the fa4 column and `<tl column>/fa4` for every tl column timed somewhere;
    a row whose FA4 was not timed ends with the reason."""
    with_fa4 = any("fa4" in r or "fa4_note" in r for r in rows)
    tl_names = ["tl", *(f"tl{x}" for x in suffixes)]
    names = [*tl_names, "sdpa-flash", "sdpa-cudnn", "flex", *(["fa4"] if with_fa4 else [])]
    ratios = [("tl", "sdpa-flash", "tl/flash"), ("tl", "sdpa-cudnn", "tl/cudnn")]
    if with_fa4:
        ratios += [(n, "fa4", f"{n}/fa4") for n in tl_names if any(r.get(n) for r in rows)]
    widths = [max(8, len(h)) for _, _, h in ratios]
    lines = [
        f"backward TFLOPS (bwd 2.5x, fwd+bwd 3.5x forward FLOPs), bf16, {HEADS} heads, {TOKENS} tokens, "
        f"{gpu}",
        f"{'d':>4} {'causal':>6} {'seqlen':>6} {'pass':>8} "
        + " ".join(f"{n:>11}" for n in names)
        + "  "
        + " ".join(h.rjust(w) for (_, _, h), w in zip(ratios, widths, strict=True)),
    ]
    for r in rows:
        vals = " ".join(f"{r[n]:11.1f}" if r.get(n) else f"{'n/a':>11}" for n in names)
        ratio = " ".join(
            _ratio_cell(r.get(a), r.get(b), w) for (a, b, _), w in zip(ratios, widths, strict=True)
        )
        note = f"  fa4: {r['fa4_note']}" if with_fa4 and r.get("fa4_note") else ""
        lines.append(f"{r['d']:>4} {r['causal']!s:>6} {r['seqlen']:>6} {r['pass']:>8} {vals}  {ratio}{note}")
    return "\n".join(lines)


def make_row(
    base: dict[str, Any], timings: dict[str, Any], work_flops: float, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One JSON row: `base` (d, causal, seqlen, batch, pass), TFLOPS and median ms of every timed candidate
    (None for one that failed), `extra` (the FA4 check's fields), and with FA4 timed, `<tl column>/fa4`."""
    from runner.flops import tflops

    row = dict(base)
    for name, t in timings.items():
        ok = not isinstance(t, Exception)
        row[name] = tflops(work_flops, t.median_ms / 1e3) if ok else None
        row[name + "_ms"] = t.median_ms if ok else None
    row.update(extra or {})
    if isinstance(timings.get("fa4"), Exception):
        t = timings["fa4"]
        row["fa4_note"] = f"timing failed: {type(t).__name__}: {str(t)[:120]}"
    if row.get("fa4"):
        for name in [n for n in timings if n.startswith("tl")]:
            if row.get(name):
                row[f"{name}/fa4"] = row[name] / row["fa4"]
    return row


def _one_config(
    bwd: Any,
    fwd: Any,
    others: dict[str, Any],
    d: int,
    causal: bool,
    s: int,
    flex: bool,
    target_s: float,
    fa4: Any = None,
) -> list[dict[str, Any]]:
    """Our backward (and forward + backward; the other builds' backward, e.g. the deterministic one)
    beside the baselines' at one shape, balanced order; FA4 (`fa4`: `flash_attn_func`) once its gradients
    agree with SDPA flash's."""
    import torch

    from runner.backward import backward
    from runner.bench import time_interleaved
    from runner.flops import attention_flops
    from runner.launch import attention

    b = max(1, TOKENS // s)
    g = torch.Generator(device="cuda").manual_seed(s + d)
    q, k, v, do = (
        torch.randn(b, s, HEADS, d, device="cuda", generator=g).to(torch.bfloat16) for _ in range(4)
    )
    scale = 1.0 / math.sqrt(d)
    o, lse = _sdpa_lse(q, k, v, causal, scale)
    cand_b: dict[str, Any] = {"tl": lambda i: backward(bwd, q, k, v, o, lse, do, softmax_scale=scale)}
    for name, other in others.items():
        cand_b[name] = functools.partial(_backward_run, other, q, k, v, o, lse, do, scale)
    cand_fb: dict[str, Any] = {}
    if fwd is not None:

        def tl_both(i: int) -> Any:
            o2, l2 = attention(fwd, q, k, v, softmax_scale=scale)
            return backward(bwd, q, k, v, o2, l2, do, softmax_scale=scale)

        cand_fb["tl"] = tl_both
    names = {"FLASH_ATTENTION": "sdpa-flash", "CUDNN_ATTENTION": "sdpa-cudnn", "flex": "flex"}
    for kind in ["FLASH_ATTENTION", "CUDNN_ATTENTION"] + (["flex"] if flex else []):
        try:
            cand_b[names[kind]], cand_fb[names[kind]] = _autograd(kind, q, k, v, do, causal, scale)
        except Exception as exc:
            print(f"  {names[kind]}: n/a ({type(exc).__name__}: {str(exc)[:120]})")
    fa4_info = _add_fa4(fa4, cand_b, cand_fb, q, k, v, do, causal, scale) if fa4 is not None else {}
    _check_ours(cand_b, cand_fb)
    flops = attention_flops(b, HEADS, s, s, d, mask="causal" if causal else "none")
    rows = []
    for what, cands, factor in (("bwd", cand_b, 2.5), ("fwd+bwd", cand_fb, 3.5)):
        if "tl" not in cands:  # without our forward there is nothing to compare
            continue
        timings = time_interleaved(cands, target_s=target_s, warmup_s=0.2)
        base = {"d": d, "causal": causal, "seqlen": s, "batch": b, "pass": what}
        row = make_row(base, timings, factor * flops, fa4_info)
        rows.append(row)
        _print_row(row)
    return rows


def _backward_run(
    loaded: Any, q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any, scale: float, i: int
) -> Any:
    from runner.backward import backward

    return backward(loaded, q, k, v, o, lse, do, softmax_scale=scale)


def _print_row(r: dict[str, Any]) -> None:
    parts = [
        f"{k}={v:.2f}x" if "/" in k else f"{k}={v:.1f}"
        for k, v in r.items()
        if isinstance(v, float) and not k.endswith("_ms")
    ]
    note = f" (fa4: {r['fa4_note']})" if r.get("fa4_note") else ""
    head = f"d={r['d']} causal={r['causal']} S={r['seqlen']} {r['pass']}: "
    print(head + " ".join(parts) + note, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prebuilt", type=Path, default=None)
    ap.add_argument("--build-forwards", type=Path, default=None)
    ap.add_argument("--seqlens", default="4096,8192,16384")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--flex", action="store_true", help="also FlexAttention (torch.compile per shape: slow)")
    ap.add_argument("--no-fa4", action="store_true", help="skip FlashAttention 4 even when it imports")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--target-s", type=float, default=1.5, help="timing seconds per candidate and shape")
    ap.add_argument(
        "--also", default="_det", help="comma-separated tag suffixes of other prebuilt builds to time beside"
    )
    args = ap.parse_args()
    if args.build_forwards:
        build_forwards(args.build_forwards)
        return 0
    run(args.prebuilt, [int(s) for s in args.seqlens.split(",")], [int(x) for x in args.dims.split(",")],
        args.flex, args.json, args.target_s, tuple(x for x in args.also.split(",") if x),
        fa4=not args.no_fa4)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
