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
from tl_language.resources import register_estimate, warps


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    est = register_estimate(model)
    limit = model.target.regs_per_thread
    if est is None or est.total <= limit:
        return
    rng = param_range(model, "warps", "BN", "BM") or header_range(document)
    if rng is None:
        return
    yield make("TL304", rng,
               f"about {est.total} registers per thread ({est.accumulators} for fp32 accumulators over "
               f"{est.threads} threads + {est.fragments} for operand fragments) exceeds {limit} on "
               f"{model.target.arch}; the kernel would spill: use more warps (now {warps(model)}) "
               "or a smaller BN")
