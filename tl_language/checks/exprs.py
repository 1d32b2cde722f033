"""TL120–TL126, TL128: score, mask and sink expressions, side tensors and runtime Scalars.

Score statements are the `Compute` lines of the key loop that read or write the scores (the result of
the loop's `get` GEMM) and the ops after the loop on the output accumulator; their expressions may use
index values, side-tensor subscripts, Scalars and reals. Everywhere else (Params, shapes, offsets,
coordinates, loop bounds, the `Mask` header) expressions are integer arithmetic over Params and sizes.
Types: "int", "real", "bool"; an int operand of real math converts, a bool never does.
"""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import syntax as ast
from tl_language.checks._support import closest, replace_fix
from tl_language.diagnostics import Diagnostic, make
from tl_language.model import BUILTINS, INDEX_NAMES, Model
from tl_language.ops import FUNCTIONS

SIZE_DIMS = ("batch", "heads", "heads_kv", "seqlen_q", "seqlen_k")
SIDE_DTYPES = ("float32", "int32")
_ARITH = ("+", "-", "*", "/", "%")
_COMPARE = ("<", "<=", ">", ">=", "==", "!=")
_LOGIC = ("&", "|")
# Builtins that have a value inside a score expression (the others are memory offsets or softmax state).
_SCORE_BUILTINS = {"seqlen_q": "int", "seqlen_k": "int", "heads": "int", "heads_kv": "int", "batch": "int",
                   "scale": "real"}  # fmt: skip


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    scores = _score_tensors(model)
    side = model.side_tensors()
    yield from _scalars(model)
    yield from _side_tensors(model, side)
    yield from _mask_without_header(model, scores)
    for stmt in model.statements:
        if _is_normalize(stmt):
            continue  # `Compute Divide acc_o, rowsum`: the softmax's own division
        for e, ctx in _expressions(stmt, scores):
            if ctx == "score":
                values, output = _values(model, stmt, scores)
                yield from _Typer(model, side, values, output=output).run(e, stmt)
            else:
                yield from _integer_only(e)


def _mask_without_header(model: Model, scores: set[str]) -> Iterator[Diagnostic]:
    if model.mask != "none":
        return
    for s in model.statements:
        if (
            isinstance(s, ast.ComputeStmt)
            and s.op is not None
            and s.op.name.lower() == "mask"
            and len(s.args) == 1
            and isinstance(s.args[0], ast.Name)
            and s.args[0].name in scores
        ):
            yield make(
                "TL127",
                s.range,
                "`Compute Mask S` applies the `Mask` header, which is `none` here: "
                "nothing is masked (give a condition, e.g. `Compute Mask S, kv_idx <= q_idx`)",
            )


def _is_normalize(stmt: ast.Stmt) -> bool:
    return (
        isinstance(stmt, ast.ComputeStmt)
        and stmt.op is not None
        and stmt.op.name.lower() == "divide"
        and len(stmt.args) == 2
        and isinstance(stmt.args[1], ast.Name)
        and stmt.args[1].name == "rowsum"
    )


def _values(model: Model, stmt: ast.Stmt, gemm_results: set[str]) -> tuple[set[str], bool]:
    """The tiles a score statement may read as values: the scores in a statement on the scores, and in a
    statement on the output accumulator (after the loop) that accumulator alone."""
    accs = {
        s.result.name
        for s in model.statements
        if isinstance(s, ast.ComputeStmt)
        and s.op
        and s.op.name.lower() == "gemm"
        and s.result
        and s.mode == "accumulate"
    }
    target = stmt.result.name if isinstance(stmt, ast.ComputeStmt) and stmt.result else None
    if (
        isinstance(stmt, ast.ComputeStmt)
        and target is None
        and stmt.args
        and isinstance(stmt.args[0], ast.Name)
    ):
        target = stmt.args[0].name
    if target in accs:
        return {target}, True  # type: ignore[arg-type]
    return gemm_results - accs, False


def _score_tensors(model: Model) -> set[str]:
    """Results of GEMMs: the scores (`get`) and the output accumulator (`accumulate`), whose Compute
    statements take score expressions."""
    out: set[str] = set()
    for s in model.statements:
        if isinstance(s, ast.ComputeStmt) and s.op and s.op.name.lower() == "gemm" and s.result:
            out.add(s.result.name)
    return out


def _expressions(stmt: ast.Stmt, scores: set[str]) -> Iterator[tuple[ast.Expr, str]]:
    if isinstance(stmt, ast.ComputeStmt):
        op = stmt.op.name.lower() if stmt.op else ""
        on_scores = op != "gemm" and (
            (stmt.result is not None and stmt.result.name in scores)
            or any(isinstance(a, ast.Name) and a.name in scores for a in stmt.args[:1])
        )
        for a in stmt.args:
            yield a, "score" if on_scores else "int"
    elif isinstance(stmt, ast.ParamStmt | ast.ForStmt | ast.MaskStmt | ast.AllocateStmt | ast.CopyStmt):
        exprs: list[ast.Expr | None] = []
        if isinstance(stmt, ast.ParamStmt):
            exprs = [stmt.value]
        elif isinstance(stmt, ast.ForStmt):
            exprs = [stmt.start, stmt.stop]
        elif isinstance(stmt, ast.MaskStmt):
            exprs = list(stmt.args)
        elif isinstance(stmt, ast.AllocateStmt):
            exprs = [*(stmt.shape or []), stmt.offset]
        else:
            exprs = [*(stmt.tile or []), stmt.coordinate.value if stmt.coordinate else None]
        for e in exprs:
            if e is not None:
                yield e, "int"


def _integer_only(e: ast.Expr) -> Iterator[Diagnostic]:
    for n in ast.expr_walk(e):
        if isinstance(n, ast.Real):
            yield make("TL128", n.range, f"`{n.text}` is a real number; this place takes integers")
        elif isinstance(n, ast.Name) and n.name in INDEX_NAMES:
            yield make(
                "TL123",
                n.range,
                f"`{n.name}` ({INDEX_NAMES[n.name]}) exists per score: use it in a `Compute … S` "
                "statement of the key loop or in `Compute Mask S, …`",
            )
        elif isinstance(n, ast.Subscript | ast.Call):
            what = "a side-tensor subscript" if isinstance(n, ast.Subscript) else "a function call"
            yield make(
                "TL123",
                n.range,
                f"{what} belongs in a score or mask expression (`Compute … S` in the key loop)",
            )
        elif isinstance(n, ast.BinOp) and n.op not in ("+", "-", "*", "/"):
            yield make(
                "TL122",
                n.range,
                f"`{n.op}` belongs in a score or mask expression; this place "
                "takes integer arithmetic (`+ - * /`)",
            )
        elif isinstance(n, ast.Unary) and n.op == "!":
            yield make("TL122", n.range, "`!` belongs in a mask expression")


class _Typer:
    def __init__(self, model: Model, side: dict[str, object], scores: set[str], *, output: bool) -> None:
        self.model, self.side, self.scores, self.output = model, side, scores, output
        self.out: list[Diagnostic] = []

    def run(self, e: ast.Expr, stmt: ast.ComputeStmt) -> list[Diagnostic]:  # type: ignore[override]
        ty = self.type(e)
        op = stmt.op.name.lower() if stmt.op else ""
        first = stmt.args[0] if stmt.args else None
        if op == "mask" and e is not first and ty not in ("bool", None):
            self.out.append(
                make(
                    "TL122",
                    e.range,
                    f"a mask keeps the scores where a condition holds: "
                    f"`{ast.expr_text(e)}` is {_a(ty)}, not a boolean (e.g. `kv_idx <= q_idx`)",
                )
            )
        elif op == "where" and e is first and ty not in ("bool", None):
            self.out.append(
                make(
                    "TL122",
                    e.range,
                    f"`Where`'s first operand is a condition; `{ast.expr_text(e)}` is {_a(ty)}",
                )
            )
        elif op not in ("mask", "where") and ty == "bool":
            self.out.append(
                make(
                    "TL122",
                    e.range,
                    f"`{ast.expr_text(e)}` is a boolean; this operand "
                    "is a number (use `where(cond, a, b)` to choose between numbers)",
                )
            )
        if self.output:
            for n in ast.expr_walk(e):  # the output accumulator: one factor per row
                if isinstance(n, ast.Name) and n.name == "kv_idx":
                    self.out.append(
                        make("TL123", n.range, "the output is scaled per row: it may not depend on `kv_idx`")
                    )
        if op in ("max", "min") and len(stmt.args) != 2 and e is first:
            self.out.append(
                make(
                    "TL108",
                    stmt.op.range if stmt.op else e.range,
                    f"`{stmt.op.name if stmt.op else op}` "
                    "on the scores is elementwise and takes two operands (`Compute Max S, 0.0 and get "
                    "new S`); a row maximum is the Softmax's own",
                )
            )
        if op == "softmax" and e is not first:
            for n in ast.expr_walk(e):
                if isinstance(n, ast.Name) and (n.name in ("q_idx", "kv_idx") or n.name in self.scores):
                    self.out.append(
                        make(
                            "TL123",
                            n.range,
                            f"a sink is one logit per (batch, head): it may not depend on `{n.name}`",
                        )
                    )
        return self.out

    def type(self, e: ast.Expr) -> str | None:
        """ "int" | "real" | "bool", or None after a reported error (no cascades)."""
        if isinstance(e, ast.Num):
            return "int"
        if isinstance(e, ast.Real):
            return "real"
        if isinstance(e, ast.Hole):
            return None
        if isinstance(e, ast.Paren):
            return self.type(e.inner)
        if isinstance(e, ast.Name):
            return self._name(e)
        if isinstance(e, ast.Unary):
            t = self.type(e.operand)
            if e.op == "!":
                return self._want(e.operand, t, "bool", "`!` negates a condition")
            return self._want(e.operand, t, "number", "`-` negates a number")
        if isinstance(e, ast.BinOp):
            return self._binop(e)
        if isinstance(e, ast.Call):
            return self._call(e)
        if isinstance(e, ast.Subscript):
            return self._subscript(e)
        return None

    def _name(self, n: ast.Name) -> str | None:
        if n.name in self.scores:
            return "real"
        if n.name in INDEX_NAMES:
            return "int"
        s = self.model.scalars.get(n.name)
        if s is not None:
            return "real" if s.is_real else "int"
        if n.name in self.model.params:
            return "int"
        if n.name in _SCORE_BUILTINS:
            return _SCORE_BUILTINS[n.name]
        if n.name in self.side:
            self.out.append(
                make(
                    "TL124",
                    n.range,
                    f"`{n.name}` is a side tensor: read one element with a "
                    f"subscript, e.g. `{n.name}[head_idx]`",
                )
            )
            return None
        if n.name in BUILTINS:
            self.out.append(
                make(
                    "TL123",
                    n.range,
                    f"`{n.name}` ({BUILTINS[n.name]}) has no value inside a score expression",
                )
            )
            return None
        if n.name in self.model.tensors:
            self.out.append(
                make(
                    "TL124",
                    n.range,
                    f"`{n.name}` is a tile, not a value of this score; "
                    "score expressions read side tensors (global, never copied) by subscript",
                )
            )
        return None  # undefined: TL101

    def _want(self, e: ast.Expr, t: str | None, want: str, why: str) -> str | None:
        if t is None:
            return None
        ok = t == want or (want == "number" and t in ("int", "real"))
        if not ok:
            self.out.append(make("TL122", e.range, f"{why}: `{ast.expr_text(e)}` is {_a(t)}"))
            return None
        return t

    def _binop(self, e: ast.BinOp) -> str | None:
        a, b = self.type(e.left), self.type(e.right)
        if e.op in _LOGIC:
            x = self._want(e.left, a, "bool", f"`{e.op}` joins conditions")
            y = self._want(e.right, b, "bool", f"`{e.op}` joins conditions")
            return "bool" if x and y else None
        x = self._want(e.left, a, "number", f"`{e.op}` takes numbers")
        y = self._want(e.right, b, "number", f"`{e.op}` takes numbers")
        if x is None or y is None:
            return None
        if e.op in _COMPARE:
            return "bool"
        if e.op == "%":
            if "real" in (x, y):
                self.out.append(make("TL122", e.range, "`%` takes integers (e.g. `(q_idx - kv_idx) % 4`)"))
                return None
            if self.model.evaluate(e.right) == 0:
                self.out.append(make("TL122", e.right.range, "`% 0`: the remainder of a division by zero"))
                return None
            return "int"
        if e.op == "/":
            return "real"
        return "real" if "real" in (x, y) else "int"

    def _call(self, e: ast.Call) -> str | None:
        name = e.func.name.lower()
        f = FUNCTIONS.get(name)
        if f is None:
            hit = closest(name, FUNCTIONS)
            names = ", ".join(FUNCTIONS)
            hint = f"; did you mean `{hit}`?" if hit else ""
            self.out.append(
                make(
                    "TL120",
                    e.func.range,
                    f"unknown function `{e.func.name}`{hint} (TL has {names})",
                    fixes=replace_fix(e.func.range, hit) if hit else (),
                )
            )
            for a in e.args:
                self.type(a)
            return None
        if len(e.args) != f.arity:
            self.out.append(
                make(
                    "TL121",
                    e.range,
                    f"`{f.name}` takes {f.arity} argument{'s' if f.arity != 1 else ''}, found {len(e.args)}",
                )
            )
            return None
        types = [self.type(a) for a in e.args]
        if f.kind == "where":
            c = self._want(e.args[0], types[0], "bool", "`where`'s first argument is a condition")
            x = self._want(e.args[1], types[1], "number", "`where` chooses between numbers")
            y = self._want(e.args[2], types[2], "number", "`where` chooses between numbers")
            if c is None or x is None or y is None:
                return None
            return "real" if "real" in (x, y) else "int"
        want = f"`{f.name}` takes numbers"
        checked = [self._want(a, t, "number", want) for a, t in zip(e.args, types, strict=True)]
        if any(t is None for t in checked):
            return None
        if f.kind == "float":
            return "real"
        return "real" if "real" in checked else "int"

    def _subscript(self, e: ast.Subscript) -> str | None:
        t = self.side.get(e.tensor.name)
        types = [self.type(i) for i in e.indices]
        if t is None:
            if e.tensor.name in self.model.tensors:
                self.out.append(
                    make(
                        "TL124",
                        e.tensor.range,
                        f"`{e.tensor.name}` is not a side tensor (a "
                        "tensor in global memory that no Copy moves); only those are subscripted",
                    )
                )
            elif e.tensor.name in self.model.params or e.tensor.name in BUILTINS:
                self.out.append(make("TL124", e.tensor.range, f"`{e.tensor.name}` is not a tensor"))
            return None  # an undefined name is TL101
        stmt = t.placements["global"].stmt  # type: ignore[attr-defined]
        dims = getattr(stmt, "shape", None) or []
        if len(e.indices) != len(dims):
            self.out.append(
                make(
                    "TL124",
                    e.range,
                    f"`{e.tensor.name}` has {len(dims)} dimension"
                    f"{'s' if len(dims) != 1 else ''}, found {len(e.indices)} index"
                    f"{'es' if len(e.indices) != 1 else ''}",
                )
            )
        for i, ty in zip(e.indices, types, strict=True):
            if ty in ("real", "bool"):
                self.out.append(
                    make("TL122", i.range, f"a subscript is an integer: `{ast.expr_text(i)}` is {_a(ty)}")
                )
        dtype = getattr(stmt, "dtype", None)
        return "int" if dtype is not None and dtype.name.lower() == "int32" else "real"


def _a(t: str | None) -> str:
    return {"int": "an integer", "real": "a real number", "bool": "a boolean"}.get(t or "", "unknown")


def _scalars(model: Model) -> Iterator[Diagnostic]:
    seen: dict[str, ast.ScalarStmt] = {}
    for stmt in model.statements:
        if not isinstance(stmt, ast.ScalarStmt) or stmt.name is None:
            continue
        name = stmt.name.name
        if name in seen:
            line = seen[name].range.start.line + 1
            yield make("TL126", stmt.name.range, f"Scalar `{name}` is already defined at line {line}")
            continue
        seen[name] = stmt
        clash = (
            "a Param" if name in model.params else
            "a builtin" if name in BUILTINS or name in INDEX_NAMES else
            "a tensor" if name in model.tensors else None
        )  # fmt: skip
        if clash:
            yield make("TL126", stmt.name.range, f"`{name}` is {clash}; a Scalar needs its own name")
        decl = model.scalars.get(name)
        if stmt.value is not None and decl is not None and decl.value is None:
            yield make(
                "TL126",
                stmt.value.range,
                f"a Scalar's default is a number (`30.0` for a real, "
                f"`2048` for an integer), found `{ast.expr_text(stmt.value)}`",
            )


def _side_tensors(model: Model, side: dict[str, object]) -> Iterator[Diagnostic]:
    """Checked where a tensor is one for sure: subscripted, or declared `with dtype` (an unfinished
    document may simply not have copied its Q yet)."""
    read = {
        n.tensor.name
        for s in model.statements
        if isinstance(s, ast.ComputeStmt)
        for a in s.args
        for n in ast.expr_walk(a)
        if isinstance(n, ast.Subscript)
    }
    for name, t in side.items():
        stmt = t.placements["global"].stmt  # type: ignore[attr-defined]
        if not isinstance(stmt, ast.AllocateStmt) or (name not in read and stmt.dtype is None):
            continue
        if stmt.dtype is not None and stmt.dtype.name.lower() not in SIDE_DTYPES:
            hit = closest(stmt.dtype.name.lower(), {d: d for d in SIDE_DTYPES})
            yield make(
                "TL125",
                stmt.dtype.range,
                f"side tensor `{name}`: element type `{stmt.dtype.name}`; the kernels read float32 or int32",
                fixes=replace_fix(stmt.dtype.range, hit) if hit else (),
            )
        if stmt.offset is not None:
            yield make(
                "TL125",
                stmt.offset.range,
                f"side tensor `{name}` is addressed by its subscripts; drop `with offset`",
            )
        for d in stmt.shape or []:
            if isinstance(d, ast.Name) and d.name in SIZE_DIMS:
                continue
            v = model.evaluate(d)
            if v is None or v <= 0:
                yield make(
                    "TL125",
                    d.range,
                    f"side tensor `{name}`: dim `{ast.expr_text(d)}` is neither a "
                    f"size ({', '.join(SIZE_DIMS)}) nor a positive integer",
                )
