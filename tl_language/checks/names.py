"""TL101/TL102: every name is defined before it is used, and defined once.

Scopes: Params are visible everywhere (a Param's own value may only use earlier Params); runtime builtins
(`model.BUILTINS`) always; a loop variable inside its loop; a tensor from the statement that first places
it (Allocate, Copy, Compute result) onwards. `Compute … and get new X` replaces X legally; `and get X`
on a tensor an earlier Compute already produced is a redefinition (write `get new`).
"""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import syntax as ast
from tl_language.checks._sketch import placeholder_accumulator, placeholder_bound
from tl_language.checks._support import closest
from tl_language.diagnostics import Diagnostic, make
from tl_language.facts import first_placement, index_of
from tl_language.model import BUILTINS, INDEX_NAMES, Model


class _Scope:
    def __init__(self, model: Model) -> None:
        self.model = model
        self.loop_vars: list[str] = []

    def known(self, name: str, index: int) -> bool:
        if name in self.model.params or name in BUILTINS or name in self.loop_vars:
            return True
        if name in INDEX_NAMES or name in self.model.scalars:
            return True  # where they may appear is TL123's business (checks/exprs.py)
        first = first_placement(self.model, name)
        return first is not None and first[0] < index

    def suggestion(self, name: str) -> str:
        pool = [*self.model.params, *BUILTINS, *INDEX_NAMES, *self.model.scalars, *self.loop_vars,
                *self.model.tensors]
        pool = [p for p in pool if p != name]
        found = next((p for p in pool if p.lower() == name.lower()), None) or _close(name, pool)
        return f"; did you mean `{found}`?" if found else ""


def _close(name: str, pool: list[str]) -> str | None:
    lowered = {p.lower(): p for p in pool}
    hit = closest(name, lowered)
    return lowered[hit] if hit else None


def _undefined(scope: _Scope, n: ast.Name | ast.Ident, index: int, what: str = "") -> Diagnostic:
    model = scope.model
    first = first_placement(model, n.name)
    if first is not None and first[0] >= index:
        line = first[1].stmt.range.start.line + 1
        return make("TL101", n.range, f"`{n.name}` is used before it is defined (line {line})")
    return make("TL101", n.range, f"undefined {what}name `{n.name}`{scope.suggestion(n.name)}")


def _exprs(scope: _Scope, exprs: list[ast.Expr | None], index: int) -> Iterator[Diagnostic]:
    for e in exprs:
        for n in ast.expr_names(e):
            if not scope.known(n.name, index):
                yield _undefined(scope, n, index)


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    scope = _Scope(model)
    yield from _block(scope, document.statements)


def _block(scope: _Scope, stmts: list[ast.Stmt]) -> Iterator[Diagnostic]:
    model = scope.model
    produced: dict[str, ast.ComputeStmt] = {}  # results of `and get X` in this block
    for stmt in stmts:
        i = index_of(model, stmt)
        if isinstance(stmt, ast.ParamStmt):
            yield from _param(model, stmt)
        elif isinstance(stmt, ast.MaskStmt):
            yield from _exprs(scope, list(stmt.args), i)
        elif isinstance(stmt, ast.AllocateStmt):
            yield from _exprs(scope, [*(stmt.shape or []), stmt.offset], i)
            if stmt.name is not None:
                yield from _tensor_name(scope, stmt.name)
                yield from _reallocated(model, stmt, stmt.name)
        elif isinstance(stmt, ast.CopyStmt):
            coord = stmt.coordinate.value if stmt.coordinate else None
            yield from _exprs(scope, [*(stmt.tile or []), coord], i)
            from_global = stmt.src is not None and stmt.src.name.lower() == "global"
            if stmt.name is not None and not from_global and not scope.known(stmt.name.name, i):
                yield _undefined(scope, stmt.name, i, "tensor ")
            if stmt.alias is not None:
                yield from _tensor_name(scope, stmt.alias)
        elif isinstance(stmt, ast.ComputeStmt):
            yield from _compute(scope, stmt, i, produced)
        elif isinstance(stmt, ast.ReshapeStmt):
            if stmt.name is not None and not scope.known(stmt.name.name, i):
                yield _undefined(scope, stmt.name, i, "tensor ")
        elif isinstance(stmt, ast.ForStmt):
            # a sketch's `for j = 0: N` is a placeholder (TL455, checks/sketch_parts.py), not TL101
            bound = None if placeholder_bound(model, stmt) else stmt.stop
            yield from _exprs(scope, [stmt.start, bound], i)
            var = stmt.var.name if stmt.var else None
            if stmt.var is not None and var is not None:
                yield from _loop_var(scope, stmt.var)
                scope.loop_vars.append(var)
            yield from _block(scope, stmt.body)
            if var is not None:
                scope.loop_vars.pop()


def _param(model: Model, stmt: ast.ParamStmt) -> Iterator[Diagnostic]:
    if stmt.name is None:
        return
    owner = model.params.get(stmt.name.name)
    if owner is not None and owner.stmt is not stmt:
        yield make("TL102", stmt.name.range,
                   f"Param `{stmt.name.name}` is already defined at line {owner.stmt.range.start.line + 1}")
    here = stmt.range.start
    for n in ast.expr_names(stmt.value):
        p = model.params.get(n.name)
        if p is not None and p.stmt.range.start < here:
            continue
        if p is None and n.name in BUILTINS:
            continue
        if p is not None:
            msg = (f"`{n.name}` is defined later (line {p.stmt.range.start.line + 1}); "
                   "a Param may only use Params above it")
        else:
            msg = f"undefined name `{n.name}` in the value of Param `{stmt.name.name}`"
        yield make("TL101", n.range, msg)


def _tensor_name(scope: _Scope, ident: ast.Ident) -> Iterator[Diagnostic]:
    if ident.name in scope.model.params:
        yield make("TL102", ident.range, f"`{ident.name}` is a Param; a tensor needs its own name")
    elif ident.name in BUILTINS:
        yield make("TL102", ident.range,
                   f"`{ident.name}` is a builtin ({BUILTINS[ident.name]}); rename the tensor")
    elif ident.name in scope.loop_vars:
        yield make("TL102", ident.range, f"`{ident.name}` is a loop variable; rename the tensor")


def _reallocated(model: Model, stmt: ast.AllocateStmt, name: ast.Ident) -> Iterator[Diagnostic]:
    if stmt.level is None:
        return
    t = model.tensors.get(name.name)
    p = t.placements.get(stmt.level.name.lower()) if t else None
    if p is not None and p.stmt is not stmt and index_of(model, p.stmt) < index_of(model, stmt):
        yield make("TL102", name.range,
                   f"`{name.name}` is already in {stmt.level.name.lower()} memory "
                   f"(line {p.stmt.range.start.line + 1})")


def _compute(
    scope: _Scope, stmt: ast.ComputeStmt, i: int, produced: dict[str, ast.ComputeStmt]
) -> Iterator[Diagnostic]:
    model = scope.model
    yield from _exprs(scope, list(stmt.args), i)
    res = stmt.result
    if res is None:
        return
    yield from _tensor_name(scope, res)
    defined = scope.known(res.name, i)
    if placeholder_accumulator(model, stmt):
        pass  # a sketch accumulates before allocating: TL456 (checks/sketch_parts.py)
    elif stmt.mode in ("accumulate", "get_new") and not defined:
        how = "accumulate into" if stmt.mode == "accumulate" else "replace (`get new`)"
        alt = f"; allocate it first (`Allocate {res.name} in register (…)`)" if stmt.mode == "accumulate" \
            else f"; write `and get {res.name}` to define it"
        yield make("TL101", res.range, f"cannot {how} `{res.name}`: it is not defined{alt}")
    elif stmt.mode == "get" and res.name in produced and not _allocated(model, res.name):
        prior = produced[res.name]
        yield make("TL102", res.range,
                   f"`{res.name}` already holds the result of line {prior.range.start.line + 1}; "
                   f"write `and get new {res.name}` to replace it")
    if stmt.mode == "get":
        produced.setdefault(res.name, stmt)


def _allocated(model: Model, name: str) -> bool:
    t = model.tensors.get(name)
    return t is not None and any(isinstance(p.stmt, ast.AllocateStmt) for p in t.placements.values())


def _loop_var(scope: _Scope, var: ast.Ident) -> Iterator[Diagnostic]:
    model = scope.model
    if var.name in scope.loop_vars:
        yield make("TL102", var.range, f"loop variable `{var.name}` shadows the enclosing loop's")
    elif var.name in model.params or var.name in BUILTINS or var.name in model.tensors:
        yield make("TL102", var.range,
                   f"loop variable `{var.name}` reuses the name of a Param, builtin or tensor")
