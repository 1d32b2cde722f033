"""Ranked values for `?` parameters and tiles for sketch Copies: the translator's planner when importable,
else a small fallback over the GPU model (MMA granularity and shared-memory fit)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tl_language import gpu
from tl_language import syntax as ast
from tl_language.model import Model

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Suggestion:
    value: int
    score: float
    reason: str
    source: str  # "planner" | "gpu model"


def parameter_suggestions(model: Model, name: str) -> list[Suggestion]:
    try:
        from translator.planner import suggest
    except ImportError as exc:
        log.info("planner unavailable (%s); using the GPU-model fallback", exc)
    else:
        try:
            return [
                Suggestion(int(s.value), float(s.score), str(s.reason), "planner")
                for s in suggest(model, name)
            ]
        except Exception:
            log.exception("planner.suggest failed for %s; using the GPU-model fallback", name)
    return fallback(model, name)


def fallback(model: Model, name: str) -> list[Suggestion]:
    """Tile sizes that are multiples of the MMA shape and, with the other known tiles, fit shared memory."""
    target = model.target
    mma = target.mma.get(model.dtype) or next(iter(target.mma.values()))
    elem = gpu.DTYPE_BYTES.get(model.dtype, 2)
    low = name.lower()
    if low in ("d", "d_qk", "d_v", "head_dim"):
        return [
            Suggestion(d, 0.0, f"a head dimension {target.arch} kernels support", "gpu model")
            for d in gpu.HEAD_DIMS
        ]
    if low in ("warps", "num_warps"):
        return [
            Suggestion(w, 1.0 - i * 0.1, f"{w * 32} threads per block", "gpu model")
            for i, w in enumerate((4, 8, 2))
        ]
    if low in ("stages", "num_stages"):
        return [
            Suggestion(2, 1.0, "double-buffered K/V with cp.async", "gpu model"),
            Suggestion(1, 0.5, "single buffer (no cp.async pipeline)", "gpu model"),
        ]
    d = _param(model, "d") or _param(model, "d_qk") or 128
    bm = _param(model, "BM") or 128
    granule = mma.m if low in ("bm", "block_m", "br") else mma.n
    out: list[Suggestion] = []
    for v in (128, 64, 256, 32, 16):
        if v % granule:
            continue
        if low in ("bm", "block_m", "br"):
            smem = elem * (v * d + 2 * 2 * (_param(model, "BN") or 64) * d)
        else:
            smem = elem * (bm * d + 2 * 2 * v * d)
        if smem > target.smem_per_block:
            continue
        score = round(1.0 - abs(v - 96) / 256, 3)
        out.append(
            Suggestion(
                v,
                score,
                f"multiple of the {mma} MMA; {smem // 1024} KiB of "
                f"{target.smem_per_block // 1024} KiB shared memory",
                "gpu model",
            )
        )
    return sorted(out, key=lambda s: -s.score)


def _param(model: Model, name: str) -> int | None:
    p = model.params.get(name)
    return p.value if p else None


def tile_suggestion(model: Model, tensor: str) -> str | None:
    """The tile a sketch `Copy T` should carry: its global shape with the sequence dim replaced by the block
    parameter (BM for query rows, BN for key/value rows)."""
    t = model.tensors.get(tensor)
    shape = t.shape_at("global") if t else None
    if not shape:
        return None
    block_m, block_n = _block_params(model)
    parts = []
    for e in shape:
        if isinstance(e, ast.Name) and e.name == "seqlen_q":
            parts.append(block_m or "BM")
        elif isinstance(e, ast.Name) and e.name == "seqlen_k":
            parts.append(block_n or "BN")
        else:
            parts.append(ast.expr_text(e))
    return "(" + ", ".join(parts) + ")"


def _block_params(model: Model) -> tuple[str | None, str | None]:
    try:
        from translator.planner.roles import find_roles

        roles = find_roles(model)
        return roles.name("block_m"), roles.name("block_n")
    except ImportError:
        pass
    except Exception:
        log.exception("planner roles failed")
    names = {n.lower(): n for n in model.params}
    return names.get("bm"), names.get("bn")


def sketch_tile(model: Model, tensor: str) -> str | None:
    """The tile of a load being written in a sketch, for a tensor nothing declares yet: Q and O tiles are a
    block of query rows, K and V tiles a block of key rows (the roles stage 2 gives them)."""
    if tensor in model.tensors or tensor in model.params:
        return None
    block_m, block_n = _block_params(model)
    rows = (block_m or "BM") if tensor.upper().startswith(("Q", "O")) else (block_n or "BN")
    width = "d_qk" if tensor.upper().startswith(("Q", "K")) else "d_v"
    return f"({rows}, {width if width in model.params else 'd'})"
