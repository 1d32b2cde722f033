"""TL307: parameter values are in range: positive tiles, warps a power of two up to 16, stages ≥ 1,
consumers 1–3, overlap, pingpong, persistent and fast_tanh 0 or 1, fma_exps 0–8; the inference Params
(splits 0–128, page_size a power of two from 16 to 256, pack_gqa and varlen 0 or 1)."""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import syntax as ast
from tl_language.diagnostics import Diagnostic, make
from tl_language.inference import FLAGS as INFERENCE_FLAGS
from tl_language.inference import MAX_SPLITS, PAGE_SIZES
from tl_language.model import Model
from tl_language.resources import HOPPER_MAX_CONSUMERS, WARP_CHOICES

_POSITIVE = ("BM", "BN", "d", "d_qk", "d_v", "group", "heads_kv", "stages")
_FLAGS = ("overlap", "pingpong", "persistent", "fast_tanh", *INFERENCE_FLAGS)  # 0/1 switches


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    for p in model.params.values():
        stmt = p.stmt
        if p.hole or stmt.value is None:
            continue
        rng = stmt.value.range
        if p.value is None:
            if _evaluable(model, stmt):
                yield make("TL307", rng,
                           f"`{p.name} = {ast.expr_text(stmt.value)}` does not evaluate to a whole number")
            continue
        if p.name == "warps" and p.value not in WARP_CHOICES:
            choices = ", ".join(map(str, WARP_CHOICES))
            yield make("TL307", rng, f"warps = {p.value}; expected one of {choices}")
        elif p.name in _FLAGS and p.value not in (0, 1):
            yield make("TL307", rng, f"{p.name} = {p.value}; expected 0 (off) or 1 (on)")
        elif p.name == "consumers" and not 1 <= p.value <= HOPPER_MAX_CONSUMERS:
            yield make("TL307", rng, f"consumers = {p.value}; sm_90 kernels use 1 to {HOPPER_MAX_CONSUMERS} "
                       "consumer warp groups")
        elif p.name == "fma_exps" and not 0 <= p.value <= 8:
            yield make("TL307", rng, f"fma_exps = {p.value}; expected 0 to 8 (exp2s of every eight on the "
                       "FP32 pipe)")
        elif p.name == "splits" and not 0 <= p.value <= MAX_SPLITS:
            yield make("TL307", rng, f"splits = {p.value}; expected 0 (automatic) to {MAX_SPLITS}")
        elif p.name == "page_size" and p.value not in (0, *PAGE_SIZES):
            sizes = ", ".join(map(str, PAGE_SIZES))
            yield make("TL307", rng, f"page_size = {p.value}; expected one of {sizes} tokens (0: contiguous)")
        elif p.name in _POSITIVE and p.value <= 0:
            yield make("TL307", rng, f"{p.name} = {p.value}; it must be at least 1")


def _evaluable(model: Model, stmt: ast.ParamStmt) -> bool:
    """True if every name in the value is an earlier Param with a value: None then means inexact."""
    for n in ast.expr_names(stmt.value):
        p = model.params.get(n.name)
        if p is None or p.value is None or not p.stmt.range.start < stmt.range.start:
            return False
    return not _has_hole(stmt.value)


def _has_hole(e: ast.Expr | None) -> bool:
    if isinstance(e, ast.Hole):
        return True
    if isinstance(e, ast.Paren):
        return _has_hole(e.inner)
    if isinstance(e, ast.BinOp):
        return _has_hole(e.left) or _has_hole(e.right)
    return False
