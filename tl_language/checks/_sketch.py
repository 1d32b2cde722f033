"""What counts as a placeholder in a sketch, shared by the rules that would otherwise report it as an error
(`names`: TL101, `transitions`: TL105) and `sketch_parts`, which reports it as a hint (TL453–TL456).

A document is a sketch when it has holes (`?`) or untiled copies from global memory (`Model.is_sketch`):
the paper's first stage, statements without the parameter-level parts. In a sketch the parts stage 2
adds — the global Allocates, the register accumulators, the loop bound — are missing by design, so their
absence is a hint; the same absence in TL code (no holes, every tile written) stays an error.
"""

from __future__ import annotations

from tl_language import syntax as ast
from tl_language.facts import index_of, levels_before
from tl_language.model import BUILTINS, INDEX_NAMES, Model


def defined_anywhere(model: Model, name: str) -> bool:
    """A Param, builtin, Scalar, index value, loop variable or tensor of the document."""
    return (
        name in model.params
        or name in BUILTINS
        or name in INDEX_NAMES
        or name in model.scalars
        or name in model.tensors
        or any(lp.var is not None and lp.var.name == name for lp in model.loops)
    )


def placeholder_bound(model: Model, loop: ast.ForStmt) -> ast.Name | None:
    """`for j = 0: N` in a sketch, N a bare name nothing defines: the paper's loop-count placeholder."""
    stop = loop.stop
    if model.is_sketch and isinstance(stop, ast.Name) and not defined_anywhere(model, stop.name):
        return stop
    return None


def placeholder_accumulator(model: Model, stmt: ast.ComputeStmt) -> bool:
    """`Compute GEMM S, V and accumulate O` in a sketch, O not in registers yet (undefined, or only the
    global output the sketch names its accumulator after): stage 2 allocates a register accumulator."""
    if not model.is_sketch or stmt.mode != "accumulate" or stmt.result is None:
        return False
    return "register" not in levels_before(model, stmt.result.name, index_of(model, stmt))
