"""Where a document-wide diagnostic (shared memory, registers) is shown: on the knob that controls it."""

from __future__ import annotations

from tl_language import syntax as ast
from tl_language.model import Model
from tl_language.source import Range


def param_range(model: Model, *names: str) -> Range | None:
    """The value of the first of `names` that is a Param (or its name if the value is missing)."""
    for name in names:
        p = model.params.get(name)
        if p is not None:
            return p.stmt.value.range if p.stmt.value is not None else p.ident.range
    return None


def header_range(document: ast.Document) -> Range | None:
    for stmt in document.statements:
        if isinstance(stmt, ast.TargetStmt):
            return stmt.arch.range if stmt.arch else stmt.range
    return document.statements[0].range if document.statements else None
