"""TL303: shared memory per block, all pipeline stages included, fits the target.

The estimate (`resources.shared_memory_bytes`) is loop-invariant tiles once plus tiles loaded inside the
loop × stages — for attention, Q tile + stages × (K tile + V tile) in the input dtype.
"""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import syntax as ast
from tl_language.checks._location import header_range, param_range
from tl_language.diagnostics import Diagnostic, make
from tl_language.model import Model
from tl_language.resources import shared_memory_breakdown, shared_memory_overhead, stages


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    parts = shared_memory_breakdown(model)
    if not parts:
        return
    s = stages(model)
    extra = shared_memory_overhead(model)  # sm_90: mbarriers, alignment pad, static shared memory
    total = sum(b.bytes * (s if b.staged else 1) for b in parts) + extra
    limit = model.target.smem_per_block
    if total <= limit:
        return
    once = " + ".join(f"{b.tensor} {b.bytes:,}" for b in parts if not b.staged)
    staged = " + ".join(f"{b.tensor} {b.bytes:,}" for b in parts if b.staged)
    terms = [t for t in (once, f"{s} stages × ({staged})" if staged else "") if t]
    if extra:
        terms.append(f"{extra:,} for barriers and alignment")
    rng = param_range(model, "stages", "BN", "BM") or header_range(document)
    if rng is None:
        return
    yield make("TL303", rng,
               f"shared memory per block is {total:,} bytes ({' + '.join(terms)}) but {model.target.arch} "
               f"allows {limit:,}; lower stages, BN or BM")
