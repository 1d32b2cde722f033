"""Facts about a bound model that several rules, hover and the translator share.

Statement order and loop nesting, where a tensor is at a given statement, dimension equality over
symbolic sizes, and the fragment layout (MMA_C / MMA_A) each tensor has before every statement. Each is
computed once per model and kept in `model.cache`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tl_language import syntax as ast
from tl_language.model import BUILTINS, Model, Placement
from tl_language.ops import op as lookup_op

LEVELS = ("global", "shared", "register")
LAYOUTS = ("MMA_A", "MMA_B", "MMA_C")


def order(model: Model) -> dict[int, int]:
    """Statement identity → its index in source order."""
    got = model.cache.get("order")
    if got is None:
        got = {id(s): i for i, s in enumerate(model.statements)}
        model.cache["order"] = got
    return got  # type: ignore[return-value]


def index_of(model: Model, stmt: ast.Stmt) -> int:
    return order(model).get(id(stmt), -1)


def _parents(model: Model) -> dict[int, ast.ForStmt]:
    got = model.cache.get("parents")
    if got is None:
        got = {id(s): loop for loop in model.loops for s in loop.body}
        model.cache["parents"] = got
    return got  # type: ignore[return-value]


def enclosing_loops(model: Model, stmt: ast.Stmt) -> list[ast.ForStmt]:
    """The loops around `stmt`, innermost first."""
    parents = _parents(model)
    out: list[ast.ForStmt] = []
    node = parents.get(id(stmt))
    while node is not None and len(out) < 64:  # bound: a malformed tree can never loop forever
        out.append(node)
        node = parents.get(id(node))
    return out


def arrivals(model: Model) -> dict[str, dict[str, int]]:
    """Tensor → level → index of the statement that first placed it there."""
    got = model.cache.get("arrivals")
    if got is None:
        idx = order(model)
        got = {name: {lv: idx.get(id(p.stmt), -1) for lv, p in t.placements.items()}
               for name, t in model.tensors.items()}
        model.cache["arrivals"] = got
    return got  # type: ignore[return-value]


def placement_before(model: Model, name: str, level: str, index: int) -> Placement | None:
    """The placement of tensor `name` at `level` if it was made before statement `index`."""
    at = arrivals(model).get(name)
    if at is None or at.get(level, index) >= index:
        return None
    return model.tensors[name].placements[level]


def levels_before(model: Model, name: str, index: int) -> list[str]:
    at = arrivals(model).get(name)
    return [lv for lv, i in at.items() if i < index] if at else []


def first_placement(model: Model, name: str) -> tuple[int, Placement] | None:
    """The earliest placement of tensor `name` at any level, with its statement index."""
    at = arrivals(model).get(name)
    if not at:
        return None
    level = min(at, key=at.__getitem__)
    return at[level], model.tensors[name].placements[level]


def is_scalar_name(model: Model, name: str) -> bool:
    """A parameter or a runtime builtin: a value, not a tile."""
    return name in model.params or name in BUILTINS


# ---- dimensions ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class Dim:  # a value: never mutated (not frozen only because frozen __init__ is twice as slow)
    value: int | None
    text: str

    def __str__(self) -> str:
        if self.value is None or self.text == str(self.value):
            return self.text
        return f"{self.text} = {self.value}"


def dims(model: Model, shape: list[ast.Expr] | None) -> list[Dim] | None:
    """The dimensions of a shape; cached per shape list (the model keeps every list alive)."""
    if shape is None:
        return None
    cache: dict[int, list[Dim]] = model.cache.setdefault("dims", {})  # type: ignore[assignment]
    got = cache.get(id(shape))
    if got is None:
        got = [Dim(model.evaluate(e), ast.expr_text(e)) for e in shape]
        cache[id(shape)] = got
    return got


def dim_eq(a: Dim, b: Dim) -> bool | None:
    """Whether two dimensions are equal: by value when both are known, by spelling otherwise, else unknown."""
    if a.value is not None and b.value is not None:
        return a.value == b.value
    if a.text == b.text and a.text != "?":
        return True
    return None


def shape_text(ds: list[Dim]) -> str:
    return "(" + ", ".join(str(d) for d in ds) + ")"


def operand_shape(model: Model, name: str, index: int) -> list[Dim] | None:
    """A tile operand's shape at statement `index`: its register tile, else its shared one."""
    for level in ("register", "shared"):
        p = placement_before(model, name, level, index)
        if p is not None and p.tile is not None:
            return dims(model, p.tile)
    return None


# ---- fragment layouts ------------------------------------------------------------------------------------


def layouts(model: Model) -> dict[int, dict[str, str | None]]:
    """For every statement (by identity), the fragment layout of each tensor just before it.

    A GEMM result is `MMA_C`; `Reshape X from (MMA_C, …) to (MMA_A, …)` makes it `MMA_A`; an elementwise
    `Compute` result inherits its first operand's layout; an Allocate or a Copy into registers starts
    afresh (None). Source order stands in for control flow, which is exact for the straight-line loop
    bodies TL describes.
    """
    got = model.cache.get("layouts")
    if got is not None:
        return got  # type: ignore[return-value]
    state: dict[str, str | None] = {}
    out: dict[int, dict[str, str | None]] = {}
    for stmt in model.statements:
        if isinstance(stmt, ast.ComputeStmt | ast.ReshapeStmt):
            out[id(stmt)] = dict(state)
        if isinstance(stmt, ast.AllocateStmt) and stmt.name:
            state[stmt.name.name] = None
        elif isinstance(stmt, ast.CopyStmt) and stmt.name:
            state[(stmt.alias or stmt.name).name] = None
        elif isinstance(stmt, ast.ComputeStmt) and stmt.op is not None:
            target = stmt.result
            if target is None and stmt.args and isinstance(stmt.args[0], ast.Name):
                continue  # in place: the operand keeps its layout
            if target is None:
                continue
            spec = lookup_op(stmt.op.name)
            if spec is not None and spec.name == "GEMM":
                state[target.name] = "MMA_C"
            else:
                first = next((a.name for a in stmt.args if isinstance(a, ast.Name) and a.name in state), None)
                state[target.name] = state.get(first) if first else state.get(target.name)
        elif isinstance(stmt, ast.ReshapeStmt) and stmt.name and stmt.dst_layout:
            state[stmt.name.name] = stmt.dst_layout[0].name.upper()
    model.cache["layouts"] = out
    return out


def line_indent(text_lines: list[str], line: int) -> str:
    if 0 <= line < len(text_lines):
        raw = text_lines[line]
        return raw[: len(raw) - len(raw.lstrip(" \t"))]
    return ""
