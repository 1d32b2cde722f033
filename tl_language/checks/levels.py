"""TL103/TL106: memory levels are real, and a tensor is only used at a level it has reached.

A Copy reads its tensor at the source level; an elementwise Compute, `accumulate`/`get new` results and
Reshape need registers (GEMM operands are the `gemm_operands` rule's job, TL201). A copy from global of a
tensor with no global allocation at all is TL105 (`transitions`), not TL103.
"""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import syntax as ast
from tl_language.checks._sketch import placeholder_accumulator
from tl_language.checks._support import closest, replace_fix
from tl_language.diagnostics import Diagnostic, make
from tl_language.facts import LEVELS, first_placement, index_of, levels_before
from tl_language.model import Model
from tl_language.ops import op as lookup_op

_WHERE = {"global": "global memory", "shared": "shared memory", "register": "registers"}


def _level_ok(ident: ast.Ident | None) -> Iterator[Diagnostic]:
    if ident is None or ident.name.lower() in LEVELS:
        return
    hint = closest(ident.name, LEVELS)
    msg = f"unknown memory level `{ident.name}`; expected `global`, `shared` or `register`"
    if hint:
        msg += f"; did you mean `{hint}`?"
    yield make("TL106", ident.range, msg, fixes=replace_fix(ident.range, hint) if hint else ())


def _not_at(model: Model, ident: ast.Ident | ast.Name, level: str, i: int, why: str) -> Iterator[Diagnostic]:
    """TL103 if tensor `ident` is defined before statement i but not at `level` by then."""
    t = model.tensors.get(ident.name)
    if t is None:
        return
    first = first_placement(model, ident.name)
    if first is None or first[0] >= i:
        return  # not defined yet: TL101's business
    have = levels_before(model, ident.name, i)
    if level in have:
        return
    later = t.placements.get(level)
    where = ", ".join(_WHERE.get(lv, lv) for lv in have if lv in _WHERE) or "no memory level"
    msg = f"`{ident.name}` is not in {_WHERE[level]} here{why}; it is in {where}"
    if later is not None and index_of(model, later.stmt) > i:
        msg += f" (it reaches {_WHERE[level]} only at line {later.stmt.range.start.line + 1})"
    yield make("TL103", ident.range, msg)


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    for i, stmt in enumerate(model.statements):
        if isinstance(stmt, ast.AllocateStmt):
            yield from _level_ok(stmt.level)
        elif isinstance(stmt, ast.CopyStmt):
            yield from _level_ok(stmt.src)
            yield from _level_ok(stmt.dst)
            if stmt.name is None or stmt.src is None:
                continue
            src = stmt.src.name.lower()
            if src not in LEVELS:
                continue
            t = model.tensors.get(stmt.name.name)
            if src == "global" and (t is None or "global" not in t.placements):
                continue  # TL105
            yield from _not_at(model, stmt.name, src, i, "")
        elif isinstance(stmt, ast.ComputeStmt):
            spec = lookup_op(stmt.op.name) if stmt.op else None
            if spec is not None and spec.name != "GEMM":
                for e in stmt.args:
                    if isinstance(e, ast.Name):
                        yield from _not_at(model, e, "register", i, f" (`{spec.name}` works on registers)")
            if stmt.result is not None and stmt.mode in ("accumulate", "get_new") \
                    and not placeholder_accumulator(model, stmt):  # a sketch's: TL456
                yield from _not_at(model, stmt.result, "register", i, " (results live in registers)")
        elif isinstance(stmt, ast.ReshapeStmt) and stmt.name is not None:
            yield from _not_at(model, stmt.name, "register", i, " (Reshape relabels a register fragment)")
