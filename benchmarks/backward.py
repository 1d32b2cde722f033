"""The derived backward against SDPA flash (FlashAttention 2), SDPA cuDNN and FlexAttention: backward alone
and forward + backward, same process, balanced order (`runner.bench.time_interleaved`).

    python3 benchmarks/backward.py --prebuilt .cache/bwd --json results.json     # on the H200

bf16, 16k tokens per configuration (batch = 16384 / seqlen), 16 heads, head dims 64 and 128, seqlen 4k,
8k and 16k, causal and not. TFLOPS count the backward as 2.5× the forward's FLOPs (`runner.flops`), the
forward + backward as 3.5×. The baselines' backward is timed as `torch.autograd.grad` of a retained
forward graph, so only their backward kernels run; ours gets O and LSE from SDPA flash's forward (a
softmax's O and LSE are the same whoever computes them). Our forward + backward pairs the TL forward
kernel of the same program with its backward.

`--prebuilt DIR`: the cubins `benchmarks/backward_verify.py --build DIR` wrote (mha_fwd / causal_mha_fwd,
bf16, d 64 and 128) and the forwards `--build-forwards DIR` writes; without it everything compiles here.
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
        bwd = build_backward(text, dtype="bf16", arch="sm_80").load()
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


def _autograd(kind: str, q: Any, k: Any, v: Any, do: Any, causal: bool, scale: float) -> tuple[Any, Any]:
    """(backward only, forward + backward) callables of a baseline."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    leaves = [t.detach().transpose(1, 2).requires_grad_(True) for t in (q, k, v)]
    dot = do.transpose(1, 2)
    if kind == "flex":
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
    torch.cuda.synchronize()
    return bwd_only, both


def run(
    prebuilt: Path | None,
    seqlens: list[int],
    dims: list[int],
    flex: bool,
    json_path: Path | None,
    target_s: float = 1.5,
    suffixes: tuple[str, ...] = ("_det",),
) -> None:
    import torch

    rows: list[dict[str, Any]] = []
    gpu = torch.cuda.get_device_name()
    for d in dims:
        for causal in (False, True):
            bwd, fwd, others = _ours(prebuilt, causal, d, suffixes)
            for s in seqlens:
                rows += _one_config(bwd, fwd, others, d, causal, s, flex, target_s)
                torch.cuda.empty_cache()
    names = ["tl", *(f"tl{x}" for x in suffixes), "sdpa-flash", "sdpa-cudnn", "flex"]
    print(
        f"\nbackward TFLOPS (bwd 2.5x, fwd+bwd 3.5x forward FLOPs), bf16, {HEADS} heads, {TOKENS} tokens, "
        f"{gpu}"
    )
    print(
        f"{'d':>4} {'causal':>6} {'seqlen':>6} {'pass':>8} "
        + " ".join(f"{n:>11}" for n in names)
        + "  tl/flash tl/cudnn"
    )
    for r in rows:
        vals = " ".join(f"{r[n]:11.1f}" if r.get(n) else f"{'n/a':>11}" for n in names)
        ratio = "  ".join(
            f"{r['tl'] / r[n]:7.2f}x" if r.get("tl") and r.get(n) else "    n/a "
            for n in ("sdpa-flash", "sdpa-cudnn")
        )
        print(f"{r['d']:>4} {r['causal']!s:>6} {r['seqlen']:>6} {r['pass']:>8} {vals}  {ratio}")
    if json_path:
        json_path.write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1))


def _one_config(
    bwd: Any, fwd: Any, others: dict[str, Any], d: int, causal: bool, s: int, flex: bool, target_s: float
) -> list[dict[str, Any]]:
    """Our backward (and forward + backward; the other builds' backward, e.g. the deterministic one)
    beside the baselines' at one shape, balanced order."""
    import torch

    from runner.backward import backward
    from runner.bench import time_interleaved
    from runner.flops import attention_flops, tflops
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
    flops = attention_flops(b, HEADS, s, s, d, mask="causal" if causal else "none")
    rows = []
    for what, cands, factor in (("bwd", cand_b, 2.5), ("fwd+bwd", cand_fb, 3.5)):
        if "tl" not in cands:  # without our forward there is nothing to compare
            continue
        timings = time_interleaved(cands, target_s=target_s, warmup_s=0.2)
        row: dict[str, Any] = {"d": d, "causal": causal, "seqlen": s, "batch": b, "pass": what}
        for name, t in timings.items():
            ok = not isinstance(t, Exception)
            row[name] = tflops(factor * flops, t.median_ms / 1e3) if ok else None  # type: ignore[union-attr]
            row[name + "_ms"] = t.median_ms if ok else None  # type: ignore[union-attr]
        rows.append(row)
        _print_row(row)
    return rows


def _backward_run(
    loaded: Any, q: Any, k: Any, v: Any, o: Any, lse: Any, do: Any, scale: float, i: int
) -> Any:
    from runner.backward import backward

    return backward(loaded, q, k, v, o, lse, do, softmax_scale=scale)


def _print_row(r: dict[str, Any]) -> None:
    parts = [f"{k}={v:.1f}" for k, v in r.items() if isinstance(v, float) and not k.endswith("_ms")]
    print(f"d={r['d']} causal={r['causal']} S={r['seqlen']} {r['pass']}: " + " ".join(parts), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prebuilt", type=Path, default=None)
    ap.add_argument("--build-forwards", type=Path, default=None)
    ap.add_argument("--seqlens", default="4096,8192,16384")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--flex", action="store_true", help="also FlexAttention (torch.compile per shape: slow)")
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
        args.flex, args.json, args.target_s, tuple(x for x in args.also.split(",") if x))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
