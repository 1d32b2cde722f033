"""The catalogue variants as benchmark cases: their TL text for one shape of the sweep, and how each
baseline spells the same variant (FlexAttention's score_mod / mask_mod, FA4's native arguments).

Shared by `benchmarks/variants.py` (timing) and `benchmarks/profile_ncu.py` (hardware counters), so that
both measure the same kernels against the same baselines.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VARIANTS_DIR = ROOT / "examples" / "variants"


def tl_path(name: str) -> Path:
    """`examples/variants/NAME.tl`, else `examples/NAME.tl` (the plain kernels, e.g. `mha_fwd`)."""
    path = VARIANTS_DIR / f"{name}.tl"
    return path if path.exists() else ROOT / "examples" / f"{name}.tl"


def catalogue() -> list[str]:
    """Every catalogue variant's name (`examples/variants/NAME.tl`), sorted."""
    return sorted(p.stem for p in VARIANTS_DIR.glob("*.tl"))


def with_param(text: str, param: str, value: str) -> str:
    """`text` with `Param param = value`, replacing the line that sets it or added after the Dtype line."""
    line = f"Param {param} = {value}"
    pattern = rf"(?m)^Param {re.escape(param)} = .*$"
    if re.search(pattern, text):
        return re.sub(pattern, line, text)
    return re.sub(r"(?m)^(Dtype .*)$", lambda m: f"{m.group(1)}\n{line}", text, count=1)


def plain_texts(hdim: int = 128) -> dict[str, str]:
    """The plain kernels each variant is compared with, `plain_none` and `plain_causal`, at the measured
    default tile for head dim `hdim` (`hopper_tile`: what `benchmarks/attention.py` times, e.g. 192 × 128
    rows on three consumer warp groups at d 64)."""
    from tl_language.resources import hopper_tile

    base = (ROOT / "examples" / "hopper_mha_fwd.tl").read_text()
    out = {}
    for name, mask in (("plain_none", "none"), ("plain_causal", "causal")):
        text = re.sub(r"(?m)^Mask .*$", f"Mask {mask}", base) if mask != "none" else base
        tile = hopper_tile(hdim, mask)
        for param in ("BM", "BN", "consumers", "pingpong"):
            text = with_param(text, param, str(tile[param]))
        out[name] = text
    return out


def for_shape(text: str, dtype: str, hdim: int) -> str:
    """A TL text retargeted to the sm_90 path at `dtype` and head dim `hdim`. A file written for another
    target keeps its tiles except the key tile, which its Target chose for mma.sync (BN 64): the planner
    picks it for sm_90 (`translator.planner.fill` on `Param BN = ?`; its picks, ALiBi 128 and relative
    bias 160, are the measured winners of the A/B against 64, 516 → 582 and 539 → 620 TFLOPS at 16k on the
    H200, docs/results/2026-12-01-h200-variants-fa4-16k.json). A file moved to another head dim gets both
    tiles from the planner (at d ≤ 64 the measured ones: BN 128, and the rows of
    `translator.planner.query_rows`; docs/results/2026-12-04-h200-variants-d64-*.json) and one consumer
    warp group per 64 of those rows."""
    retile = re.search(r"(?m)^Target sm_90", text) is None
    written = re.search(r"(?m)^Param d = (\d+)", text)
    redim = written is not None and int(written.group(1)) != hdim
    text = re.sub(r"(?m)^Target .*$", "Target sm_90", text)
    text = re.sub(r"(?m)^Dtype .*$", f"Dtype {dtype}", text)
    text = with_param(text, "d", str(hdim))
    if retile or redim:
        from translator.planner.fill import fill

        text = with_param(text, "BN", "?")
        if redim:
            text = with_param(with_param(text, "BM", "?"), "consumers", "?")
        text = fill(text).text
        if redim:
            from tl_language.resources import default_consumers

            rows = re.search(r"(?m)^Param BM = (\d+)", text)
            text = with_param(text, "consumers", str(default_consumers(int(rows.group(1)) if rows else None)))
    return text


GLOBAL_TOKENS = 32  # global + sliding's global tokens per sequence in the benchmarks (`side_tensors`)


def side_tensors(
    program: Any, B: int, H: int, hkv: int, S: int, generator: Any, device: str = "cuda"
) -> dict[str, Any]:
    """Random valid side tensors for `program` at (B, H, hkv, S), with the values a model would give
    where random ones would not: ALiBi's slopes 2^(-8 (h + 1) / H), and global + sliding's flags on the
    first `GLOBAL_TOKENS` tokens of each sequence (Longformer's CLS and question tokens), where
    `make_side_tensors` flags a random half of the sequence, which makes that mask nearly dense."""
    import torch

    from runner.ir_reference import make_side_tensors

    side = make_side_tensors(program, B, H, hkv, S, S, generator=generator, device=device) if program else {}
    if "slopes" in side:
        side["slopes"] = torch.exp2(-8.0 * torch.arange(1, H + 1, device=device) / H).float()
    if "is_global" in side:
        side["is_global"] = torch.zeros_like(side["is_global"])
        side["is_global"][..., :GLOBAL_TOKENS] = 1
    return side


def kept_pairs(program: Any, q: Any, k: Any, side: dict[str, Any]) -> float:
    """The (query, key) pairs `program`'s masks keep on these inputs (summed over batch and heads),
    counted by the IR reference on a ones V: the useful work TFLOPS are quoted on."""
    import torch

    from kernel_ir.expr import const
    from kernel_ir.program import Forward
    from runner.ir_reference import forward_reference

    count = Forward(
        score=const(1.0), masks=program.masks, normalizer="none", tensors=program.tensors,
        scalars=program.scalars,
    )  # fmt: skip
    ones = torch.ones(k.shape[0], k.shape[1], k.shape[2], 8, device=q.device)
    kept, _ = forward_reference(
        count, q[..., :8].float(), k[..., :8].float(), ones, tensors={t: side[t] for t in side}, chunk=512
    )
    return float(kept[..., 0].sum())


def flex_mods(name: str, scalars: dict[str, Any], side: dict[str, Any], sq: int, sk: int) -> Any:
    """(score_mod, mask_mod) for FlexAttention with the same meaning as the catalogue file, or None where
    FlexAttention cannot say it (a sink logit in the denominator, a normalizer other than softmax)."""
    import torch

    off = sk - sq

    def causal(b: Any, h: Any, q: Any, k: Any) -> Any:
        return k <= q + off

    if name == "softcap":
        cap = scalars["cap"]
        return (lambda s, b, h, q, k: cap * torch.tanh(s / cap)), None
    if name == "alibi":
        slopes = side["slopes"]
        return (lambda s, b, h, q, k: s + slopes[h] * (k - (q + off))), causal
    if name == "relative_bias":
        rel = side["rel"]
        return (lambda s, b, h, q, k: s + rel[h, torch.clamp(k - q, -64, 64) + 64]), None
    if name == "sliding_window":
        w = scalars["window_size"]
        return None, lambda b, h, q, k: (k <= q + off) & (q + off - k < w)
    if name == "sink_tokens_window":
        w, n = scalars["window_size"], scalars["n_sink"]
        return None, lambda b, h, q, k: (k <= q + off) & ((k < n) | (q + off - k < w))
    if name == "prefix_lm":
        prefix = side["prefix"]
        return None, lambda b, h, q, k: (k < prefix[b]) | (k <= q + off)
    if name == "document_mask":
        doc = side["doc"]
        return None, lambda b, h, q, k: (k <= q + off) & (doc[b, q] == doc[b, k])
    if name == "dilated_window":
        w, dil = scalars["W"], scalars["dil"]
        return None, lambda b, h, q, k: (torch.abs(q - k) <= w) & (torch.abs(q - k) % dil == 0)
    if name == "global_sliding":
        w, glob = scalars["W"], side["is_global"]
        return None, lambda b, h, q, k: (torch.abs(q - k) <= w) | (glob[b, q] != 0) | (glob[b, k] != 0)
    if name == "prefix_softcap_document":
        cap, prefix, doc = scalars["cap"], side["prefix"], side["doc"]
        return (
            lambda s, b, h, q, k: cap * torch.tanh(s / cap)
        ), lambda b, h, q, k: (doc[b, q] == doc[b, k]) & ((k < prefix[b]) | (k <= q))
    return None


def flex_calls(mods: Any, q: Any, k: Any, v: Any, *, scale: float, gqa: bool = False) -> Any:
    """FlexAttention on (batch, seqlen, heads, d) tensors with `mods` = (score_mod, mask_mod): the block
    mask is built and the transposes taken once, here (outside any timing), and `call(options)` gives
    `i -> output (batch, heads, seqlen, d)` for FlexAttention's `kernel_options` (None: its Triton kernel;
    {"BACKEND": "FLASH"}: the mods lowered to FA4's CuTe DSL kernel). One compiled `flex_attention`
    serves every call."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    score_mod, mask_mod = mods
    B, S, Sk = q.shape[0], q.shape[1], k.shape[1]
    block_mask = create_block_mask(mask_mod, B, None, S, Sk, device=q.device) if mask_mod else None
    flex = torch.compile(flex_attention, dynamic=False)
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def call(options: dict[str, Any] | None) -> Any:
        return lambda i: flex(
            qt, kt, vt, score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=gqa,
            kernel_options=options,
        )  # fmt: skip

    return call


def fa4_native(name: str, scalars: dict[str, Any], side: dict[str, Any]) -> dict[str, Any] | None:
    """FA4's own arguments for the variant (`flash_attn.cute.flash_attn_func`), or None."""
    if name in ("mha_fwd", "causal_mha_fwd"):  # the plain kernels: `tl_path`
        return {"causal": name == "causal_mha_fwd"}
    if name == "softcap":
        return {"softcap": scalars["cap"]}
    if name == "sliding_window":
        return {"causal": True, "window_size": (scalars["window_size"] - 1, 0)}
    if name == "learnable_sink":
        return {"causal": True, "learnable_sink": side["sinks"]}
    return None


def allow_recompiles(limit: int = 1024) -> None:
    """Every variant (and shape) is a new score_mod / mask_mod for the one `flex_attention` code object:
    past dynamo's recompile limit (8) it runs FlexAttention eagerly, at a few TFLOPS, and a baseline
    measured so is no baseline. Raise the limits (their names moved between torch releases)."""
    import torch._dynamo

    cfg = torch._dynamo.config
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, limit)
    for name in ("accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, 8 * limit)


def fa4_available() -> bool:
    try:
        import flash_attn.cute  # noqa: F401
    except ImportError:
        return False
    return True
