"""Expression DAGs of the kernel IR's regions (score modification, mask, normaliser).

Three node kinds: `Const`, `Var` (a value the kernel has: the raw score `s`, the indices, the sequence
lengths, a runtime scalar) and `Op` (every operator and function, by name). Nodes are frozen and compare
structurally, so equal subexpressions are one node for the passes and the renderers (a DAG, not a tree).
Types are "f32", "i32" and "bool"; an `i32` operand of an `f32` operator is converted explicitly (`float`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

F32, I32, BOOL = "f32", "i32", "bool"

# Values every forward kernel has, with their type and the loop level at which they vary:
# "uniform" (one value per thread block and (batch, head)), "row" (per query row), "col" (per key),
# "elem" (per score).
INDEX_VARS: dict[str, tuple[str, str]] = {
    "s": (F32, "elem"),  # the raw score q · k of this (row, key), before any modification
    "q_idx": (I32, "row"),
    "kv_idx": (I32, "col"),
    "head_idx": (I32, "uniform"),
    "kv_head_idx": (I32, "uniform"),
    "batch_idx": (I32, "uniform"),
    "batch": (I32, "uniform"),
    "seqlen_q": (I32, "uniform"),
    "seqlen_k": (I32, "uniform"),
    "heads": (I32, "uniform"),
    "heads_kv": (I32, "uniform"),
    "softmax_scale": (F32, "uniform"),
    "window_left": (I32, "uniform"),  # the launch's window (the `Mask window` header; -1: unbounded)
    "window_right": (I32, "uniform"),
}

# name → (result type or None: the operands' type, operand types or None: any numeric, arity)
UNARY_MATH = ("tanh", "sigmoid", "exp", "exp2", "log", "abs", "relu", "neg", "rcp")
# `rcp` (1 / x on the SFU) is not TL: `kernel_ir.passes.lower_transcendentals` writes it into rendered scores
BINARY_ARITH = ("add", "sub", "mul", "div", "mod", "min", "max")
COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
BOOLEAN = ("and", "or", "not")
OPS = (*UNARY_MATH, *BINARY_ARITH, *COMPARISONS, *BOOLEAN, "where", "float")


@dataclass(frozen=True, slots=True)
class Const:
    value: float | int | bool
    type: str


@dataclass(frozen=True, slots=True)
class Var:
    """An index value, a size, the raw score, or a runtime scalar (`type` from its declaration)."""

    name: str
    type: str


@dataclass(frozen=True, slots=True)
class Load:
    """One element of a side tensor: `tensor[index...]` (row-major, its dims from the program). The
    kernels clamp each index to its dim, so an eager read under an untaken `where` branch stays inside
    the tensor; a read out of range that is used is an error the reference reports."""

    tensor: str
    index: tuple[Expr, ...]
    type: str
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.tensor, self.index, self.type)))

    def __hash__(self) -> int:  # cached: a DAG with shared nodes would otherwise rehash exponentially
        return self._hash

    def __eq__(self, other: object) -> bool:
        return _same(self, other)


@dataclass(frozen=True, slots=True)
class Op:
    op: str
    args: tuple[Expr, ...]
    type: str
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.op, self.args, self.type)))

    def __hash__(self) -> int:  # cached, as Load's
        return self._hash

    def __eq__(self, other: object) -> bool:
        return _same(self, other)


Expr = Const | Var | Load | Op


def _same(a: object, b: object) -> bool:
    """Structural equality of two DAGs, each pair of nodes compared once (two separately built copies
    of a DAG with shared nodes would otherwise compare in exponential time)."""
    stack = [(a, b)]
    seen: set[tuple[int, int]] = set()
    while stack:
        x, y = stack.pop()
        if x is y or (id(x), id(y)) in seen:
            continue
        seen.add((id(x), id(y)))
        if type(x) is not type(y) or hash(x) != hash(y):
            return False
        if isinstance(x, Op):
            if x.op != y.op or x.type != y.type or len(x.args) != len(y.args):  # type: ignore[union-attr]
                return False
            stack.extend(zip(x.args, y.args, strict=True))  # type: ignore[union-attr]
        elif isinstance(x, Load):
            if x.tensor != y.tensor or x.type != y.type or len(x.index) != len(y.index):  # type: ignore[union-attr]
                return False
            stack.extend(zip(x.index, y.index, strict=True))  # type: ignore[union-attr]
        elif x != y:
            return False
    return True


def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Op):
        return e.args
    if isinstance(e, Load):
        return e.index
    return ()


def walk(e: Expr) -> list[Expr]:
    """Every distinct node of `e`, children before parents (a topological order of the DAG)."""
    out: list[Expr] = []
    seen: set[Expr] = set()
    stack: list[tuple[Expr, bool]] = [(e, False)]
    while stack:
        node, expanded = stack.pop()
        if node in seen:
            continue
        if expanded:
            seen.add(node)
            out.append(node)
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(children(node)) if c not in seen)
    return out


# ---- construction with the implicit int → float conversion and a little constant folding -------------


def const(value: float | int | bool) -> Const:
    if isinstance(value, bool):
        return Const(value, BOOL)
    if isinstance(value, int):
        return Const(value, I32)
    return Const(float(value), F32)


def to_float(e: Expr) -> Expr:
    if e.type == F32:
        return e
    if isinstance(e, Const):
        return Const(float(e.value), F32)
    return Op("float", (e,), F32)


def _numeric(*args: Expr) -> tuple[tuple[Expr, ...], str]:
    if any(a.type == F32 for a in args):
        return tuple(to_float(a) for a in args), F32
    return args, I32


def _fold(op: str, args: tuple[Expr, ...], ty: str) -> Expr | None:
    if not all(isinstance(a, Const) for a in args):
        return None
    v = [a.value for a in args]  # type: ignore[union-attr]
    import math

    table: dict[str, Any] = {
        "add": lambda: v[0] + v[1],
        "sub": lambda: v[0] - v[1],
        "mul": lambda: v[0] * v[1],
        "neg": lambda: -v[0],
        "min": lambda: min(v[0], v[1]),
        "max": lambda: max(v[0], v[1]),
        "abs": lambda: abs(v[0]),
        "div": lambda: v[0] / v[1] if ty == F32 and v[1] != 0 else None,
        "exp": lambda: math.exp(v[0]),
        "exp2": lambda: 2.0 ** v[0],
        "float": lambda: float(v[0]),
        "not": lambda: not v[0],
        "and": lambda: v[0] and v[1],
        "or": lambda: v[0] or v[1],
    }
    f = table.get(op)
    if f is None:
        return None
    try:
        out = f()
    except (OverflowError, ValueError):
        return None
    if out is None:
        return None
    return Const(float(out) if ty == F32 else (bool(out) if ty == BOOL else int(out)), ty)


def op(name: str, *args: Expr) -> Expr:
    """Build `name(args)` with its result type, converting int operands of float math and folding
    constants (and the identities x·1, x + 0). Raises ValueError on a type or arity error (the checker
    reports those first, with a location)."""
    want = 1 if name in (*UNARY_MATH, "not", "float") else 3 if name == "where" else 2
    if len(args) != want:
        raise ValueError(f"`{name}` takes {want} operand{'s' if want != 1 else ''}, found {len(args)}")
    if name in ("tanh", "sigmoid", "exp", "exp2", "log", "rcp"):
        (a,) = args
        args, ty = (to_float(a),), F32
    elif name in ("abs", "relu", "neg"):
        args, ty = _numeric(*args)
    elif name in BINARY_ARITH:
        args, ty = _numeric(*args)
        if name == "div":  # TL's `/` on scores is real division; integer division is not offered
            args, ty = tuple(to_float(a) for a in args), F32
    elif name in COMPARISONS:
        args, _ = _numeric(*args)
        ty = BOOL
    elif name in BOOLEAN:
        if any(a.type != BOOL for a in args):
            raise ValueError(f"`{name}` takes booleans")
        ty = BOOL
    elif name == "where":
        c, a, b = args
        if c.type != BOOL:
            raise ValueError("where's condition must be a boolean")
        (a, b), ty = _numeric(a, b)
        args = (c, a, b)
    elif name == "float":
        return to_float(args[0])
    else:
        raise ValueError(f"unknown operation {name!r}")
    if any(a.type == BOOL for a in args) and name not in BOOLEAN and name != "where":
        raise ValueError(f"`{name}` takes numbers, not booleans")
    folded = _fold(name, args, ty)
    if folded is not None:
        return folded
    if name in ("and", "or"):
        for x, y in (args, args[::-1]):
            if isinstance(y, Const):
                return x if bool(y.value) == (name == "and") else y
    if name == "mul":
        for x, y in (args, args[::-1]):
            if isinstance(y, Const) and y.value == 1:
                return x
    if name in ("add", "sub") and isinstance(args[1], Const) and args[1].value == 0:
        return args[0]
    return Op(name, args, ty)


# ---- JSON (the launch spec carries the program, so a hand-edited kernel keeps its reference) ----------


def to_json(e: Expr) -> Any:
    """`{"dag": [...]}`: the distinct nodes, children first, each naming its children by position, so a
    shared subexpression is written once (a tree could be exponentially larger)."""
    nodes = walk(e)
    at = {n: i for i, n in enumerate(nodes)}
    out: list[Any] = []
    for n in nodes:
        if isinstance(n, Const):
            out.append({"const": n.value, "type": n.type})
        elif isinstance(n, Var):
            out.append({"var": n.name, "type": n.type})
        elif isinstance(n, Load):
            out.append({"load": n.tensor, "index": [at[i] for i in n.index], "type": n.type})
        else:
            out.append({"op": n.op, "args": [at[a] for a in n.args], "type": n.type})
    return {"dag": out}


def from_json(d: Any) -> Expr:
    built: list[Expr] = []
    for n in d["dag"]:
        if "const" in n:
            built.append(Const(n["const"], n["type"]))
        elif "var" in n:
            built.append(Var(n["var"], n["type"]))
        elif "load" in n:
            built.append(Load(n["load"], tuple(built[i] for i in n["index"]), n["type"]))
        else:
            built.append(Op(n["op"], tuple(built[i] for i in n["args"]), n["type"]))
    return built[-1]


def text(e: Expr) -> str:
    """A readable form for messages and generated comments."""
    if isinstance(e, Const):
        return repr(e.value) if e.type != BOOL else str(e.value).lower()
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Load):
        return f"{e.tensor}[{', '.join(text(i) for i in e.index)}]"
    infix = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "lt": "<", "le": "<=", "gt": ">",
             "ge": ">=", "eq": "==", "ne": "!=", "and": "&", "or": "|"}  # fmt: skip
    if e.op in infix:
        return f"({text(e.args[0])} {infix[e.op]} {text(e.args[1])})"
    if e.op == "neg":
        return f"-{text(e.args[0])}"
    if e.op == "not":
        return f"!{text(e.args[0])}"
    return f"{e.op}({', '.join(text(a) for a in e.args)})"
