"""TL107/TL108: `Compute` names a known operation with the right number of operands and a result."""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import syntax as ast
from tl_language.checks._support import closest, replace_fix
from tl_language.diagnostics import Diagnostic, make
from tl_language.model import Model
from tl_language.ops import OPS, op
from tl_language.source import Range


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    for stmt in model.statements:
        if not isinstance(stmt, ast.ComputeStmt) or stmt.op is None:
            continue
        spec = op(stmt.op.name)
        if spec is None:
            hit = closest(stmt.op.name, OPS)
            hint = OPS[hit].name if hit else None
            names = ", ".join(o.name for o in OPS.values())
            msg = f"unknown operation `{stmt.op.name}`; TL has {names}"
            if hint:
                msg = f"unknown operation `{stmt.op.name}`; did you mean `{hint}`? (TL has {names})"
            yield make("TL107", stmt.op.range, msg, fixes=replace_fix(stmt.op.range, hint) if hint else ())
            continue
        if not stmt.args:
            continue  # the parser already reported the missing operands
        n = len(stmt.args)
        if not spec.min_args <= n <= spec.max_args:
            yield make("TL108", Range(stmt.args[0].range.start, stmt.args[-1].range.end),
                       f"`{spec.name}` takes {spec.arity}, found {n}")
        elif spec.needs_result and stmt.mode == "inplace":
            yield make("TL108", stmt.op.range,
                       f"`{spec.name}` produces a result: add `and get X` (or `and accumulate X`)")
