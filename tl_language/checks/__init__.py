"""The checker: one rule per module, each a function `(document, model) -> Iterable[Diagnostic]`.

Add a rule by writing `tl_language/checks/<rule>.py` with a `check` function and listing it in RULES.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tl_language import syntax as ast
from tl_language.checks import (
    coverage,
    dtypes,
    exprs,
    gemm_operands,
    gemm_shapes,
    head_dims,
    headers,
    inference,
    kernel_limits,
    kernel_name,
    learnable,
    levels,
    names,
    ops,
    params,
    registers,
    reshape,
    shared_memory,
    sketch,
    sketch_parts,
    tiles,
    transitions,
)
from tl_language.diagnostics import Diagnostic, Severity
from tl_language.model import Model
from tl_language.pattern import PatternError, match_attention

Rule = Callable[[ast.Document, Model], Iterable[Diagnostic]]

RULES: list[Rule] = [
    headers.check,  # TL050–TL053
    kernel_name.check,  # TL054
    names.check,  # TL101, TL102
    levels.check,  # TL103, TL106
    transitions.check,  # TL104, TL105
    ops.check,  # TL107, TL108
    exprs.check,  # TL120–TL126, TL128
    learnable.check,  # TL129
    gemm_operands.check,  # TL201
    reshape.check,  # TL202, TL205
    gemm_shapes.check,  # TL203, TL204
    tiles.check,  # TL301, TL306
    head_dims.check,  # TL302
    shared_memory.check,  # TL303
    registers.check,  # TL304
    dtypes.check,  # TL305
    params.check,  # TL307
    inference.check,  # TL130–TL133
    kernel_limits.check,  # the translator's kernels: TL301–TL302, TL305–TL309
    coverage.check,  # TL401
    sketch.check,  # TL450–TL452
    sketch_parts.check,  # TL453–TL456
]


def run_checks(document: ast.Document, model: Model, *, syntax_errors: bool = False) -> list[Diagnostic]:
    """Every rule's diagnostics; then, on a document with no error so far (syntax included), the
    attention pattern's."""
    out: list[Diagnostic] = []
    for rule in RULES:
        out.extend(rule(document, model))
    if not syntax_errors and not any(d.severity == Severity.ERROR for d in out):
        out.extend(pattern_check(model))
    return out


def pattern_check(model: Model) -> list[Diagnostic]:
    """TL501 from the attention pattern the translator builds from (`tl_language.pattern`), on a
    document that is otherwise clean: so `tl check` refuses what `tl build` would, a fragment without a
    key loop or a header-only document included. Sketches are left to the sketch hints."""
    if model.is_sketch or not model.statements:
        return []
    try:
        match_attention(model)
    except PatternError as err:
        return list(err.diagnostics)
    return []
