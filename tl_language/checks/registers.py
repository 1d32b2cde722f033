"""TL304: the register estimate per thread stays under the target's limit (a warning: spills, not errors).

See `resources.register_estimate`: fp32 accumulators (BM·BN + BM·d_v) / threads plus one MMA k-slice of
operand fragments. Over the limit, the compiler spills to local memory and the kernel slows down.
"""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import syntax as ast
from tl_language.checks._location import header_range, param_range
from tl_language.diagnostics import Diagnostic, make
from tl_language.model import Model
from tl_language.resources import consumers, register_estimate, register_limit, warps, wgmma_kernel


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    est = register_estimate(model)
    limit = register_limit(model)
    if est is None or est.total <= limit:
        return
    rng = param_range(model, "consumers", "warps", "BN", "BM") or header_range(document)
    if rng is None:
        return
    yield make("TL304", rng,
               f"about {est.total} registers per thread ({est.accumulators} for fp32 accumulators over "
               f"{est.threads} threads + {est.fragments} for operand fragments) exceeds {limit} on "
               f"{model.target.arch}; the kernel would spill: {_remedy(model)} or a smaller BN")


def _remedy(model: Model) -> str:
    if wgmma_kernel(model):
        return f"use more consumer warp groups (now {consumers(model)}, at most 3)"
    return f"use more warps (now {warps(model)})"
