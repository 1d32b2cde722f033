"""The TL syntax tree.

Every node carries its exact `range`. Required fields may be `None` in half-typed code (`Copy Q from`):
every consumer copes. Names are `Ident` nodes so hover, rename and go-to-definition get their ranges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from tl_language.source import Range


class Level(str, Enum):  # noqa: UP042 (kept: other packages compare with plain str)
    GLOBAL = "global"
    SHARED = "shared"
    REGISTER = "register"


@dataclass(slots=True)
class Ident:
    name: str
    range: Range


# ---- expressions -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Num:
    value: int
    range: Range


@dataclass(slots=True)
class Name:
    name: str
    range: Range


@dataclass(slots=True)
class Hole:
    """`?`: a value the engineer (or the planner, or the LLM) still has to fill."""

    range: Range


@dataclass(slots=True)
class Real:
    """A real constant of a score or mask expression (`30.0`, `1e-3`); Params stay integers."""

    value: float
    text: str  # as written, so the formatter keeps `30.0` rather than `30.0000`
    range: Range


@dataclass(slots=True)
class BinOp:
    op: str  # + - * / %, comparisons < <= > >= == !=, boolean & |
    left: Expr
    right: Expr
    range: Range


@dataclass(slots=True)
class Unary:
    op: str  # "-" (negation) | "!" (boolean not)
    operand: Expr
    range: Range


@dataclass(slots=True)
class Paren:
    inner: Expr
    range: Range


@dataclass(slots=True)
class Call:
    """`tanh(x)`, `where(c, a, b)`: an elementwise function of a score or mask expression."""

    func: Ident
    args: list[Expr]
    range: Range


@dataclass(slots=True)
class Subscript:
    """`slopes[head_idx]`: one element of a side tensor in global memory."""

    tensor: Name
    indices: list[Expr]
    range: Range


Expr = Num | Real | Name | Hole | BinOp | Unary | Paren | Call | Subscript


# ---- statements --------------------------------------------------------------------------------------


@dataclass(slots=True)
class KernelStmt:
    range: Range
    name: Ident | None


@dataclass(slots=True)
class TargetStmt:
    range: Range
    arch: Ident | None


@dataclass(slots=True)
class DtypeStmt:
    range: Range
    dtype: Ident | None


@dataclass(slots=True)
class ParamStmt:
    range: Range
    name: Ident | None
    value: Expr | None


@dataclass(slots=True)
class ScalarStmt:
    """`Scalar cap = 30.0`: a runtime scalar passed at launch; the value is its default."""

    range: Range
    name: Ident | None
    value: Expr | None


@dataclass(slots=True)
class MaskStmt:
    range: Range
    kind: Ident | None  # none | causal | window
    args: list[Expr] = field(default_factory=list)  # window(LEFT, RIGHT)


@dataclass(slots=True)
class AllocateStmt:
    range: Range
    name: Ident | None
    level: Ident | None
    shape: list[Expr] | None
    offset: Expr | None = None
    dtype: Ident | None = None  # `with dtype int32`: element type of a side tensor (default float32)
    learnable: Range | None = None  # `with learnable`: the backward computes this side tensor's gradient


@dataclass(slots=True)
class Coordinate:
    axis: Ident  # `L` in `[L = j]`
    value: Expr | None
    range: Range


@dataclass(slots=True)
class CopyStmt:
    range: Range
    name: Ident | None
    tile: list[Expr] | None  # None: no tile written (a sketch)
    coordinate: Coordinate | None
    src: Ident | None
    dst: Ident | None
    alias: Ident | None = None  # `as Y`


@dataclass(slots=True)
class ComputeStmt:
    range: Range
    op: Ident | None
    args: list[Expr]
    result: Ident | None
    mode: str  # "get" | "get_new" | "accumulate" | "inplace" (no `and …` clause, e.g. `Compute Softmax S`)


@dataclass(slots=True)
class ReshapeStmt:
    range: Range
    name: Ident | None
    src_layout: list[Ident] | None
    dst_layout: list[Ident] | None


@dataclass(slots=True)
class ForStmt:
    range: Range  # the `for` line
    var: Ident | None
    start: Expr | None
    stop: Expr | None
    body: list[Stmt] = field(default_factory=list)
    end_range: Range | None = None  # None: unterminated


@dataclass(slots=True)
class ErrorStmt:
    """A line that did not parse; it keeps its range so nothing the user wrote disappears."""

    range: Range
    text: str


Stmt = (
    KernelStmt
    | TargetStmt
    | DtypeStmt
    | ParamStmt
    | ScalarStmt
    | MaskStmt
    | AllocateStmt
    | CopyStmt
    | ComputeStmt
    | ReshapeStmt
    | ForStmt
    | ErrorStmt
)


@dataclass(slots=True)
class Comment:
    text: str  # including the leading `#`
    range: Range
    trailing: bool  # after a statement on the same line


@dataclass(slots=True)
class Document:
    text: str
    statements: list[Stmt]
    comments: list[Comment]
    line_count: int

    def walk(self) -> list[Stmt]:
        """Every statement in source order, loop bodies included (the `for` before its body)."""
        out: list[Stmt] = []

        def visit(stmts: list[Stmt]) -> None:
            for s in stmts:
                out.append(s)
                if isinstance(s, ForStmt):
                    visit(s.body)

        visit(self.statements)
        return out


def expr_children(e: Expr) -> list[Expr]:
    """The direct sub-expressions of `e`, left to right."""
    if isinstance(e, BinOp):
        return [e.left, e.right]
    if isinstance(e, Unary):
        return [e.operand]
    if isinstance(e, Paren):
        return [e.inner]
    if isinstance(e, Call):
        return list(e.args)
    if isinstance(e, Subscript):
        return [e.tensor, *e.indices]
    return []


def expr_walk(e: Expr | None) -> list[Expr]:
    """Every node of `e` in pre-order, without recursion (long expressions stay cheap)."""
    out: list[Expr] = []
    stack = [e] if e is not None else []
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(expr_children(node)))
    return out


def expr_text(e: Expr | None) -> str:
    """Canonical text of an expression (used by the formatter, hover and messages)."""
    if e is None:
        return "…"
    if isinstance(e, Num):
        return str(e.value)
    if isinstance(e, Real):
        return e.text
    if isinstance(e, Name):
        return e.name
    if isinstance(e, Hole):
        return "?"
    if isinstance(e, Paren):
        return f"({expr_text(e.inner)})"
    if isinstance(e, Unary):
        return f"{e.op}{expr_text(e.operand)}"
    if isinstance(e, Call):
        return f"{e.func.name}({', '.join(expr_text(a) for a in e.args)})"
    if isinstance(e, Subscript):
        return f"{e.tensor.name}[{', '.join(expr_text(a) for a in e.indices)}]"
    return f"{expr_text(e.left)} {e.op} {expr_text(e.right)}"


def expr_names(e: Expr | None) -> list[Name]:
    """The names an expression reads (a subscripted side tensor included), in source order."""
    return [n for n in expr_walk(e) if isinstance(n, Name)]
