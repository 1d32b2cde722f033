"""Checked TL → the kernel IR's forward program (`kernel_ir.program.Forward`).

The score statements between Q·Kᵀ and the Softmax are composed in source order into one expression of
the raw score `s` (each `Compute … and get new S` rewrites S); masks are collected (the `Mask` header's
as expressions too); a Softmax's second operand is the sink; after the loop, a kernel without Softmax may
scale acc_o. Expressions were type-checked by the checker (`tl_language/checks/exprs.py`); a construct it
let through that has no IR form raises TranslateError, never a Python error.
"""

from __future__ import annotations

from kernel_ir import expr as ir
from kernel_ir.passes import launch_block_mask
from kernel_ir.program import CAUSAL_MASK, WINDOW_MASKS, Forward, Scalar, SideTensor
from tl_language import syntax as ast
from tl_language.model import INDEX_NAMES, Model
from tl_language.ops import SCORE_OPS
from tl_language.pattern import Match
from translator.errors import TranslateError, unsupported

_BINARY = {"+": "add", "-": "sub", "*": "mul", "/": "div", "%": "mod", "<": "lt", "<=": "le", ">": "gt",
           ">=": "ge", "==": "eq", "!=": "ne", "&": "and", "|": "or"}  # fmt: skip
_SIZES = ("batch", "seqlen_q", "seqlen_k", "heads", "heads_kv")


class _Lower:
    def __init__(self, model: Model, m: Match) -> None:
        self.model = model
        self.s_name = m.names["s"]
        self.side = {
            name: SideTensor(
                name, _dims(model, t.placements["global"].stmt), _dtype(t.placements["global"].stmt)
            )
            for name, t in model.side_tensors().items()
        }
        self.scalars = {
            name: Scalar(name, ir.F32 if d.is_real else ir.I32, d.value if d.value is not None else 0)
            for name, d in model.scalars.items()
        }
        self.score: ir.Expr = ir.Var("s", ir.F32)

    def expr(self, e: ast.Expr | None) -> ir.Expr:
        if e is None or isinstance(e, ast.Hole):
            raise self.fail(e, "an expression is still missing")
        try:
            return self._expr(e)
        except ValueError as exc:
            raise self.fail(e, str(exc)) from None

    def fail(self, e: ast.Expr | None, why: str) -> TranslateError:
        rng = e.range if e is not None else ast.Range.of(0, 0, 0)
        return TranslateError([unsupported(rng, f"`{ast.expr_text(e)}`: {why}")])

    def _expr(self, e: ast.Expr) -> ir.Expr:
        if isinstance(e, ast.Num):
            return ir.const(e.value)
        if isinstance(e, ast.Real):
            return ir.const(float(e.value))
        if isinstance(e, ast.Paren):
            return self._expr(e.inner)
        if isinstance(e, ast.Name):
            return self._name(e)
        if isinstance(e, ast.Unary):
            x = self._expr(e.operand)
            return ir.op("neg" if e.op == "-" else "not", x)
        if isinstance(e, ast.BinOp):
            return ir.op(_BINARY[e.op], self._expr(e.left), self._expr(e.right))
        if isinstance(e, ast.Call):
            return ir.op(e.func.name.lower(), *(self._expr(a) for a in e.args))
        if isinstance(e, ast.Subscript):
            t = self.side.get(e.tensor.name)
            if t is None:
                raise ValueError(f"`{e.tensor.name}` is not a side tensor")
            return ir.Load(t.name, tuple(self._expr(i) for i in e.indices), t.type)
        raise ValueError("not an expression the kernels evaluate")

    def _name(self, n: ast.Name) -> ir.Expr:
        name = n.name
        if name == self.s_name:
            return self.score
        if name in INDEX_NAMES or name in _SIZES:
            return ir.Var(name, ir.I32)
        if name == "scale":
            return ir.Var("softmax_scale", ir.F32)
        if name in self.scalars:
            return ir.Var(name, self.scalars[name].type)
        p = self.model.params.get(name)
        if p is not None and p.value is not None:
            return ir.const(p.value)
        raise ValueError(f"`{name}` has no value inside a score expression")

    def score_op(self, stmt: ast.ComputeStmt) -> ir.Expr:
        op = stmt.op.name.lower() if stmt.op else ""
        args = [self.expr(a) for a in stmt.args]
        fn = SCORE_OPS[op]
        if fn in _BINARY:
            if len(args) != 2:
                raise self.fail(stmt.args[0] if stmt.args else None, f"`{op}` takes two operands")
            return ir.op(_BINARY[fn], *args)
        try:
            return ir.op(fn, *args)
        except ValueError as exc:
            raise self.fail(stmt.args[0] if stmt.args else None, str(exc)) from None


def lower_forward(model: Model, m: Match, lines: dict[str, int], *, fast_tanh: bool = False) -> Forward:
    low = _Lower(model, m)
    masks: list[ir.Expr] = []
    sink = None
    softmax = False
    output_scale: ir.Expr | None = None
    for kind, stmt in m.steps:
        if not isinstance(stmt, ast.ComputeStmt):
            continue
        if kind in ("scale", "score_mod"):
            low.score = low.score_op(stmt)
        elif kind == "mask_expr":
            masks.append(low.expr(stmt.args[1]))
        elif kind == "softmax":
            softmax = True
            if len(stmt.args) == 2:
                sink = ir.to_float(low.expr(stmt.args[1]))
        elif kind == "output_scale":
            factor = low.expr(stmt.args[1])
            op = stmt.op.name.lower() if stmt.op else ""
            step = factor if op == "multiply" else ir.op("div", ir.const(1.0), factor)
            output_scale = step if output_scale is None else ir.op("mul", output_scale, step)
    header: list[ir.Expr] = []
    if model.mask == "causal":
        header = [CAUSAL_MASK]
    elif model.mask == "window":
        header = list(WINDOW_MASKS)
    all_masks = tuple(header + masks)
    return Forward(
        score=low.score,
        masks=all_masks,
        block_mask=launch_block_mask(all_masks),
        normalizer="softmax" if softmax else "none",
        sink=sink,
        output_scale=ir.to_float(output_scale) if output_scale is not None else None,
        scalars=tuple(low.scalars.values()),
        tensors=tuple(low.side.values()),
        header_mask="expr" if masks else model.mask,
        fast_tanh=fast_tanh,
        lines=lines,
    )


def _dims(model: Model, stmt: ast.Stmt) -> tuple[str | int, ...]:
    out: list[str | int] = []
    for e in getattr(stmt, "shape", None) or []:
        v = model.evaluate(e)
        if v is not None:
            out.append(v)
        elif isinstance(e, ast.Name):
            out.append(e.name)
        else:
            raise TranslateError([unsupported(e.range, "a side tensor's dims are size names or integers")])
    return tuple(out)


def _dtype(stmt: ast.Stmt) -> str:
    d = getattr(stmt, "dtype", None)
    return d.name.lower() if d is not None else "float32"
