"""Every occurrence of a user name (tensor, parameter, loop variable, runtime builtin) in a document, with
its kind and whether it is the definition: the one index behind definition, references, rename and
semantic tokens."""

from __future__ import annotations

from dataclasses import dataclass

from tl_language import Analysis
from tl_language import syntax as ast
from tl_language.model import BUILTINS
from tl_language.source import Position, Range


@dataclass(frozen=True, slots=True)
class Occurrence:
    name: str
    range: Range
    kind: str  # "tensor" | "param" | "loopvar" | "builtin" | "unknown"
    definition: bool


def _expr_names(e: ast.Expr | None) -> list[ast.Name]:
    return ast.expr_names(e)


def occurrences(analysis: Analysis) -> list[Occurrence]:
    model = analysis.model
    loop_vars = {s.var.name: s.var for s in model.loops if s.var is not None}
    raw: list[tuple[str, Range]] = []

    def add(name: str | None, rng: Range | None) -> None:
        if name and rng is not None:
            raw.append((name, rng))

    def add_expr(e: ast.Expr | None) -> None:
        for n in _expr_names(e):
            add(n.name, n.range)

    for s in analysis.document.walk():
        if isinstance(s, ast.ParamStmt):
            if s.name:
                add(s.name.name, s.name.range)
            add_expr(s.value)
        elif isinstance(s, ast.MaskStmt):
            for e in s.args:
                add_expr(e)
        elif isinstance(s, ast.AllocateStmt):
            if s.name:
                add(s.name.name, s.name.range)
            for e in s.shape or []:
                add_expr(e)
            add_expr(s.offset)
        elif isinstance(s, ast.CopyStmt):
            if s.name:
                add(s.name.name, s.name.range)
            for e in s.tile or []:
                add_expr(e)
            if s.coordinate is not None:
                add_expr(s.coordinate.value)
            if s.alias:
                add(s.alias.name, s.alias.range)
        elif isinstance(s, ast.ComputeStmt):
            for e in s.args:
                add_expr(e)
            if s.result:
                add(s.result.name, s.result.range)
        elif isinstance(s, ast.ReshapeStmt):
            if s.name:
                add(s.name.name, s.name.range)
        elif isinstance(s, ast.ForStmt):
            if s.var:
                add(s.var.name, s.var.range)
            add_expr(s.start)
            add_expr(s.stop)

    out: list[Occurrence] = []
    for name, rng in raw:
        if name in model.params:
            kind, defn = "param", model.params[name].ident.range == rng
        elif name in model.tensors:
            kind, defn = "tensor", model.tensors[name].definition.range == rng
        elif name in loop_vars:
            kind, defn = "loopvar", loop_vars[name].range == rng
        elif name in BUILTINS:
            kind, defn = "builtin", False
        else:
            kind, defn = "unknown", False
        out.append(Occurrence(name, rng, kind, defn))
    return out


def at(analysis: Analysis, pos: Position) -> Occurrence | None:
    for occ in occurrences(analysis):
        if occ.range.start.line == pos.line and occ.range.contains(pos):
            return occ
    return None


def same_symbol(analysis: Analysis, occ: Occurrence) -> list[Occurrence]:
    return [o for o in occurrences(analysis) if o.name == occ.name and o.kind == occ.kind]


def definition(analysis: Analysis, occ: Occurrence) -> Occurrence | None:
    return next((o for o in same_symbol(analysis, occ) if o.definition), None)
