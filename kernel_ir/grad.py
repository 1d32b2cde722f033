"""Derivatives of the forward's regions, symbolically on the expression DAG, for the backward skeleton.

The backward needs, per score, dX/ds (X the score region, s the raw score q · k): the softmax's
gradient dX = P ∘ (dP − D) becomes dS = dX · dX/ds, the operand of the dQ and dK GEMMs. A learnable side
tensor's gradient is Σ dX · ∂X/∂load over the scores, scattered at each read's index.

Rules (forward mode, one pass over the DAG, children first, so a shared subexpression is differentiated
once and the derivative reuses the forward's nodes, e.g. tanh's 1 − t² reads the same `tanh` node the
score computes):
    add/sub/neg     linear                         mul    da·b + a·db       div  (da − (a/b)·db) / b
    tanh  (1 − t²)·da        sigmoid  σ(1 − σ)·da  exp  eˣ·da   exp2  2ˣ·ln2·da   log  da / a
    abs   where(a < 0, −da, da)   relu  where(a > 0, da, 0)
    min   where(a ≤ b, da, db)    max   where(a ≥ b, da, db)   where(c, a, b)  where(c, da, db)
    float, integers, booleans: no derivative (their value does not depend on a float variable)
The subgradient choices (abs, relu, min and max at a tie) are torch's, so the reference's autograd
agrees everywhere it is evaluated. Masks have no derivative: they select scores, and the backward
reuses the forward's block classification (`kernel_ir.passes.block_class`).

`mod` on floats is differentiable in its dividend only (a piecewise shift); a float `%` whose divisor
depends on the variable raises `NoDerivative`, as does a variable inside a `Load`'s index.
"""

from __future__ import annotations

import math

from kernel_ir.expr import F32, Const, Expr, Load, Op, Var, op, walk

S = Var("s", F32)
_ZERO = Const(0.0, F32)
_ONE = Const(1.0, F32)


class NoDerivative(ValueError):
    """A region whose derivative the backward cannot form (said with the subexpression)."""


def _is(e: Expr, value: float) -> bool:
    return isinstance(e, Const) and e.type == F32 and e.value == value


def _add(a: Expr, b: Expr) -> Expr:
    if _is(a, 0.0):
        return b
    if _is(b, 0.0):
        return a
    return op("add", a, b)


def _sub(a: Expr, b: Expr) -> Expr:
    if _is(b, 0.0):
        return a
    if _is(a, 0.0):
        return _neg(b)
    return op("sub", a, b)


def _neg(a: Expr) -> Expr:
    if _is(a, 0.0):
        return a
    return op("neg", a)


def _mul(a: Expr, b: Expr) -> Expr:
    if _is(a, 0.0) or _is(b, 0.0):
        return _ZERO
    return op("mul", a, b)


def _where(c: Expr, a: Expr, b: Expr) -> Expr:
    if _is(a, 0.0) and _is(b, 0.0):
        return _ZERO
    if a == b:
        return a
    return op("where", c, a, b)


def derivative(e: Expr, wrt: Expr = S) -> Expr:
    """d e / d wrt, an f32 expression over the same variables as `e` (Const 0.0 where `e` does not
    depend on `wrt`). `wrt` is a float variable (`s`, a runtime scalar) or a side-tensor `Load`, taken
    as an independent variable (other reads of the same tensor at other indices are other variables)."""
    if wrt.type != F32:
        raise NoDerivative(f"cannot differentiate with respect to a {wrt.type} value")
    d: dict[Expr, Expr] = {}
    for n in walk(e):
        d[n] = _rule(n, d, wrt)
    return d[e]


def _rule(n: Expr, d: dict[Expr, Expr], wrt: Expr) -> Expr:
    from kernel_ir.expr import text

    if n == wrt:
        return _ONE
    if n.type != F32 or isinstance(n, Const | Var):
        return _ZERO
    if isinstance(n, Load):
        if any(not _is(d[i], 0.0) for i in n.index if i.type == F32):
            raise NoDerivative(f"`{text(n)}`: a side-tensor index that depends on the variable")
        return _ZERO
    assert isinstance(n, Op)
    a = n.args
    da = [d[x] for x in a]
    name = n.op
    if name == "add":
        return _add(da[0], da[1])
    if name == "sub":
        return _sub(da[0], da[1])
    if name == "neg":
        return _neg(da[0])
    if name == "mul":
        return _add(_mul(da[0], a[1]), _mul(a[0], da[1]))
    if name == "div":
        if _is(da[1], 0.0):
            return _ZERO if _is(da[0], 0.0) else op("div", da[0], a[1])
        return op("div", _sub(da[0], _mul(n, da[1])), a[1])
    if all(_is(x, 0.0) for x in da):
        return _ZERO
    if name == "tanh":
        return _mul(op("sub", _ONE, op("mul", n, n)), da[0])
    if name == "sigmoid":
        return _mul(op("mul", n, op("sub", _ONE, n)), da[0])
    if name == "exp":
        return _mul(n, da[0])
    if name == "exp2":
        return _mul(op("mul", n, Const(math.log(2.0), F32)), da[0])
    if name == "log":
        return op("div", da[0], a[0])
    if name == "abs":
        return _where(op("lt", a[0], _ZERO), _neg(da[0]), da[0])
    if name == "relu":
        return _where(op("gt", a[0], _ZERO), da[0], _ZERO)
    if name == "min":
        return _where(op("le", a[0], a[1]), da[0], da[1])
    if name == "max":
        return _where(op("ge", a[0], a[1]), da[0], da[1])
    if name == "where":
        return _where(a[0], da[1], da[2])
    if name == "mod":
        if not _is(da[1], 0.0):
            raise NoDerivative(f"`{text(n)}`: a float % whose divisor depends on the variable")
        return da[0]
    raise NoDerivative(f"no derivative rule for `{name}` in `{text(n)}`")


def loads_of(e: Expr, tensors: tuple[str, ...]) -> list[Load]:
    """The distinct reads of the named side tensors in `e`, children first."""
    return [n for n in walk(e) if isinstance(n, Load) and n.tensor in tensors]


def tensor_partials(e: Expr, tensors: tuple[str, ...]) -> list[tuple[Load, Expr]]:
    """For each read of a learnable tensor in `e`: (the read, ∂e/∂read). The tensor's gradient is the
    sum over scores of dX · ∂e/∂read, added at the read's (clamped) index."""
    out: list[tuple[Load, Expr]] = []
    for ld in loads_of(e, tensors):
        if ld.type != F32:
            raise NoDerivative(f"side tensor `{ld.tensor}` is int32: it has no gradient")
        g = derivative(e, ld)
        if not _is(g, 0.0):
            out.append((ld, g))
    return out
