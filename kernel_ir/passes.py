"""Passes over the forward IR that the backends used to hard-code.

- `log2_score`: the softmax runs on exp2, so the score region is rendered multiplied by log2(e). The
  factor is pushed through sums and through products with a uniform operand (it lands on `cap` in
  `cap · tanh(s / cap)` or on the scale in `s · scale`), never inside a nonlinear function such as `tanh`,
  where folding it would change the result.
- `reassociate`: a division by a uniform value becomes a multiply by its reciprocal (hoisted with the
  uniforms), and uniform factors of a product gather into one, so `s · scale / cap` costs one FMUL a
  score instead of an FMUL and an IEEE division (a reciprocal and about eight FP32 instructions). Values
  move by an ulp or two; the reference keeps the program's own order.
- `separate`: an index expression converted to float, or a uniform factor of one, splits into its per-key
  and per-row terms, so that `slope · float(kv_idx - q_idx)` costs a per-key and a per-row value and one
  FADD a score instead of an IADD, an I2F and an FMUL. An I2F runs on the SFU's pipe (XU), the softmax's
  exp2s' bottleneck. `float(a - b)` = `float(a) - float(b)` exactly while the indices stay under 2^24;
  the product's terms move by an ulp.
- `levels`: the loop level each subexpression varies at (uniform, row, col, elem), so the renderers hoist
  per-(batch, head) values out of the tile, per-row values out of the column loop and per-key values out of
  the row loop.
- `block_class`: which key blocks the masks empty or leave whole, by interval arithmetic over the block's
  rectangle of (q_idx, kv_idx): exact for masks built from affine index expressions, uniform values and
  side-tensor reads at uniform indices; anything else (a per-key table lookup, `%`) is "partial", decided
  per score.
- `saturations`: the `min` / `max` with a uniform bound (a clamped relative position, a bucket index) that
  a whole key block drives to that bound, by the same interval arithmetic; the renderers run such a block
  with the bound in place of the clamp, where a table read at a clamped index becomes one read a block.
- `congruences`: a divisibility test of an index difference, `(a − b) % d == 0` (through an `abs` too),
  becomes `a % d == b % d` when a and b are sums and products of indices and non-negative constants at
  different levels, so the dilated window's `abs(q_idx − kv_idx) % dil == 0` costs a remainder per row
  and one per key (hoisted, once a block) and a compare a score, not a signed remainder a score (about
  ten integer instructions). Exact for any d ≠ 0: both remainders of non-negative operands lie in
  [0, |d|), and d divides a − b exactly when they are equal; d = 0 divides by zero in both forms. The
  renderers apply it to the masks they evaluate per score; the reference keeps the program's form.
- `column_bounds`: the masks that bound the key index by a per-row value, `kv_idx ≤ U(row)` or
  `kv_idx ≥ L(row)` (an affine comparison with kv_idx's coefficient ±1, `abs(x) ≤ w` as two of them, an
  `or` of same-direction bounds and of per-row conditions as the max / min of its arms), become one interval
  of block-local columns per row, so a masked score costs no index arithmetic (FlashAttention's column
  limits, derived; the renderers test it as one bit of a row mask). The bounds are sums of the
  masks' own subexpressions (each evaluated as the mask evaluates it) and constants, added in 64 bits, so
  the interval is exact where the masks' arithmetic does not overflow; the rest of the masks stay per score.
  `tile_range` takes the same bounds at a query tile's first and last row: the tile's key range in closed
  form, which replaces the bisection over interval tests when every mask is such a bound, and then the
  run of key blocks every row keeps whole. `key_bits` turns the other conjuncts made of bounds and
  per-row or per-key conditions (an `or` of bounds in both directions, a global row or key) into set
  operations the renderers run on the row masks.
- `evaluate`: an expression with Python integers (three-valued where it reads a tensor), the planner's
  block tests.
- `score_cost`: what one score costs the SFU (MUFU instructions, and how many of them are exp2s a
  polynomial on the FMA pipe could take instead) and the FP32 pipe (the SFU is softcap's bottleneck).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernel_ir.expr import BOOL, F32, I32, INDEX_VARS, Const, Expr, Load, Op, Var, children, const, op, walk

LOG2E = 1.4426950408889634
LEVELS = ("uniform", "row", "col", "elem")


def is_uniform(e: Expr) -> bool:
    return level(e) == "uniform"


@functools.lru_cache(maxsize=65536)
def level(e: Expr) -> str:
    """The innermost loop level `e` varies at: row and col together make elem."""
    if isinstance(e, Const):
        return "uniform"
    if isinstance(e, Var):
        return INDEX_VARS.get(e.name, ("", "uniform"))[1]
    got = {level(c) for c in children(e)}
    if "elem" in got or {"row", "col"} <= got:
        return "elem"
    if "row" in got:
        return "row"
    if "col" in got:
        return "col"
    return "uniform"


def levels(roots: list[Expr]) -> dict[Expr, str]:
    """`level` of every node of the DAG under `roots`, computed once per node."""
    out: dict[Expr, str] = {}
    for r in roots:
        for n in walk(r):
            if n in out:
                continue
            if isinstance(n, Const):
                out[n] = "uniform"
            elif isinstance(n, Var):
                out[n] = INDEX_VARS.get(n.name, ("", "uniform"))[1]
            else:
                got = {out[c] for c in children(n)}
                if "elem" in got or {"row", "col"} <= got:
                    out[n] = "elem"
                else:
                    out[n] = "row" if "row" in got else ("col" if "col" in got else "uniform")
    return out


def scale_of(score: Expr) -> Expr | None:
    """The multiplier m when the score region is `s · m` with m uniform (the plain kernel's form): the
    backends then keep the raw scores, take the row max on them and fold m · log2(e) into one FFMA.
    Valid because the scale is positive (the runner refuses a non-positive softmax scale)."""
    if isinstance(score, Op) and score.op == "mul":
        a, b = score.args
        for x, y in ((a, b), (b, a)):
            if x == Var("s", F32) and is_uniform(y):
                return y
    return None


def log2_score(score: Expr) -> Expr:
    """`score · log2(e)`, with the factor pushed as far as it goes without changing any value."""
    return _times(score, LOG2E)


@functools.lru_cache(maxsize=65536)
def reassociate(e: Expr) -> Expr:
    if not isinstance(e, Op):
        return e
    args = tuple(reassociate(a) for a in e.args)
    if e.op == "div" and e.type == F32 and is_uniform(args[1]) and not is_uniform(args[0]):
        return reassociate(op("mul", args[0], op("div", const(1.0), args[1])))
    if e.op == "mul" and e.type == F32:
        a, b = args
        if is_uniform(a) and not is_uniform(b):
            a, b = b, a
        if is_uniform(b) and isinstance(a, Op) and a.op == "mul":
            x, y = a.args
            if is_uniform(x) and not is_uniform(y):
                x, y = y, x
            if is_uniform(y) and not is_uniform(x):
                return op("mul", x, op("mul", y, b))
        return op("mul", a, b)
    return op(e.op, *args)


@functools.lru_cache(maxsize=65536)
def lower_transcendentals(e: Expr, fast_tanh: bool = False) -> Expr:
    """tanh and sigmoid as the exp2 and the fast reciprocal the kernels compute them with, so that the
    passes after see their arithmetic: the exp2's argument gathers its constant with the score's scale
    (one FMUL), and a factor outside (softcap's `cap · log2 e`) folds into the `1 − 2r` (one FFMA).
    `fast_tanh` (`Forward.fast_tanh`): tanh stays, one tanh.approx on the SFU, and sigmoid(x) becomes
    1/2 + tanh(x / 2) / 2."""
    if not isinstance(e, Op):
        return e
    args = tuple(lower_transcendentals(a, fast_tanh) for a in e.args)
    if fast_tanh and e.op == "sigmoid":
        (x,) = args
        half = const(0.5)
        return op("add", half, op("mul", op("tanh", op("mul", x, half)), half))
    if fast_tanh:
        return op(e.op, *args)
    if e.op == "tanh":  # 1 − 2 / (2^(2x·log2 e) + 1)
        (x,) = args
        r = op("rcp", op("add", op("exp2", op("mul", x, const(2 * LOG2E))), const(1.0)))
        return op("sub", const(1.0), op("mul", r, const(2.0)))
    if e.op == "sigmoid":  # 1 / (1 + 2^(−x·log2 e))
        (x,) = args
        return op("rcp", op("add", op("exp2", op("mul", x, const(-LOG2E))), const(1.0)))
    return op(e.op, *args)


@functools.lru_cache(maxsize=65536)
def _times(e: Expr, k: float) -> Expr:
    if isinstance(e, Const):
        return const(float(e.value) * k)
    if isinstance(e, Op):
        if e.op in ("add", "sub"):
            return op(e.op, _times(e.args[0], k), _times(e.args[1], k))
        if e.op == "neg":
            return op("neg", _times(e.args[0], k))
        if e.op == "mul":
            a, b = e.args
            if is_uniform(a) and not is_uniform(b):
                return op("mul", _times(a, k), b)
            if is_uniform(b):
                return op("mul", a, _times(b, k))
        if e.op == "div" and is_uniform(e.args[1]):
            return op("div", _times(e.args[0], k), e.args[1])
        if e.op == "where":
            c, a, b = e.args
            return op("where", c, _times(a, k), _times(b, k))
    return op("mul", e, const(k))


def _split(e: Expr) -> tuple[str, Expr, Expr] | None:
    """(add|sub, a, b) when `e` is a sum or difference of terms that vary at different levels (a per-key
    and a per-row term, or either with a uniform one): each term is then cheaper alone."""
    if isinstance(e, Op) and e.op in ("add", "sub") and level(e) == "elem":
        a, b = e.args
        if level(a) != "elem" or level(b) != "elem":
            return e.op, a, b
    return None


@functools.lru_cache(maxsize=65536)
def separate(e: Expr) -> Expr:
    if not isinstance(e, Op):
        return e
    if e.op == "float" and (parts := _split(e.args[0])) is not None:
        kind, a, b = parts
        return op(kind, separate(op("float", a)), separate(op("float", b)))
    if e.op == "mul" and e.type == F32:
        a, b = e.args
        for u, x in ((a, b), (b, a)):
            if is_uniform(u) and not is_uniform(x):
                x = separate(x)
                if (parts := _split(x)) is not None:
                    kind, p, q = parts
                    return op(kind, separate(op("mul", p, u)), separate(op("mul", q, u)))
                return op("mul", x, u)
    return op(e.op, *(separate(a) for a in e.args))


def nonneg(e: Expr) -> bool:
    """Whether an integer expression is provably ≥ 0: the query and key indices, non-negative constants,
    and sums and products of such (the indices stay far below 2^31, so none of these wraps)."""
    if isinstance(e, Const):
        return e.type == I32 and int(e.value) >= 0
    if isinstance(e, Var):
        return e.name in ("q_idx", "kv_idx")
    if isinstance(e, Op) and e.type == I32 and e.op in ("add", "mul"):
        return all(nonneg(a) for a in e.args)
    return False


def _divisible(x: Expr, d: Expr) -> Expr | None:
    """`a % d == b % d` for `x % d == 0` with x = a − b (or |a − b|) as `congruences` allows, else None."""
    if isinstance(x, Op) and x.op == "abs":
        x = x.args[0]  # d divides |x| exactly when it divides x
    if not (isinstance(x, Op) and x.op == "sub" and x.type == I32 and d.type == I32):
        return None
    a, b = x.args
    if not (nonneg(a) and nonneg(b)) or level(a) == level(b) or level(d) != "uniform":
        return None
    return op("eq", op("mod", a, d), op("mod", b, d))


@functools.lru_cache(maxsize=65536)
def congruences(e: Expr) -> Expr:
    if not isinstance(e, Op):
        return e
    args = tuple(congruences(a) for a in e.args)
    if e.op in ("eq", "ne"):
        for m, z in (args, args[::-1]):
            if isinstance(m, Op) and m.op == "mod" and z == Const(0, I32):
                got = _divisible(*m.args)
                if got is not None:
                    return got if e.op == "eq" else op("not", got)
    return op(e.op, *args)


Q_IDX, KV_IDX = Var("q_idx", I32), Var("kv_idx", I32)


def _operands(e: Expr, name: str) -> list[Expr]:
    """The operands of a chain of one associative operator (`and`, `or`), in order."""
    if isinstance(e, Op) and e.op == name:
        return [x for a in e.args for x in _operands(a, name)]
    return [e]


@dataclass(frozen=True, slots=True)
class Linear:
    """Σ sign · term + offset: the terms are subexpressions of a mask (none varies per key), summed in 64
    bits by the renderers."""

    terms: tuple[tuple[int, Expr], ...]
    offset: int


@dataclass(frozen=True, slots=True)
class Bound:
    """`kv_idx ≤ max(alts)` (upper) or `kv_idx ≥ min(alts)` (lower), dropped on a row where one of
    `unless` (per-row or uniform conditions) holds."""

    upper: bool
    alts: tuple[Linear, ...]
    unless: tuple[Expr, ...] = ()

    def roots(self) -> list[Expr]:
        return [t for a in self.alts for _, t in a.terms] + list(self.unless)


@dataclass(frozen=True, slots=True)
class ColumnBounds:
    bounds: tuple[Bound, ...]  # the top-level conjuncts that are bounds: one interval per row
    # The other conjuncts: a bound inside one (sink tokens' `kv_idx < n_sink | window`) is not merged into
    # the interval (as compares against per-row limits under an `or` it ran out of predicate registers in
    # the sm_90 kernel, 5–7 % slower on the H200, docs/results/2026-12-01-h200-variants-column-limits.json);
    # `key_bits` renders such a conjunct as bit sets, the rest stay per score.
    rest: tuple[Expr, ...]


def _linear(e: Expr, sign: int, terms: list[tuple[int, Expr]]) -> int:
    """Flatten the sums, differences and negations of an integer expression into `terms`; the constant."""
    if isinstance(e, Const) and e.type == I32:
        return sign * int(e.value)
    if isinstance(e, Op) and e.type == I32 and e.op in ("add", "sub"):
        a, b = e.args
        return _linear(a, sign, terms) + _linear(b, sign if e.op == "add" else -sign, terms)
    if isinstance(e, Op) and e.type == I32 and e.op == "neg":
        return _linear(e.args[0], -sign, terms)
    terms.append((sign, e))
    return 0


def _comparison_bound(lhs: Expr, rhs: Expr, strict: bool) -> Bound | None:
    """The bound of `lhs ≤ rhs` (`<` when `strict`) on kv_idx, when kv_idx enters it once with
    coefficient ±1 and nothing else in it varies per key."""
    if lhs.type != I32 or rhs.type != I32:
        return None
    terms: list[tuple[int, Expr]] = []
    offset = _linear(lhs, 1, terms) + _linear(rhs, -1, terms)  # lhs − rhs ≤ −strict
    coef = sum(sg for sg, t in terms if t == KV_IDX)
    rest = [(sg, t) for sg, t in terms if t != KV_IDX]
    if coef not in (1, -1) or any(level(t) not in ("uniform", "row") for _, t in rest):
        return None
    c = -1 if strict else 0
    if coef == 1:  # kv + R ≤ c  ⇔  kv ≤ c − R
        return Bound(True, (Linear(tuple((-sg, t) for sg, t in rest), c - offset),))
    return Bound(False, (Linear(tuple(rest), offset - c),))  # −kv + R ≤ c  ⇔  kv ≥ R − c


def _comparison_bounds(e: Op) -> list[Bound] | None:
    """The one or two bounds a comparison (`≤`, `<`, `≥`, `>`; `abs(x) ≤ w` too) is equivalent to."""
    a, b = e.args if e.op in ("le", "lt") else e.args[::-1]  # as a ≤ b (or a < b)
    strict = e.op in ("lt", "gt")
    if isinstance(a, Op) and a.op == "abs" and a.type == I32 and level(b) in ("uniform", "row"):
        x = a.args[0]  # |x| ≤ b  ⇔  x ≤ b  and  −x ≤ b
        both = [_comparison_bound(x, b, strict), _comparison_bound(Op("neg", (x,), I32), b, strict)]
        return None if any(v is None for v in both) else both  # type: ignore[return-value]
    got = _comparison_bound(a, b, strict)
    return None if got is None else [got]


def _bounds_of(e: Expr) -> list[Bound] | None:
    """The bounds a conjunct is exactly equivalent to, or None."""
    if not (isinstance(e, Op) and e.type == BOOL):
        return None
    if e.op in ("le", "lt", "ge", "gt"):
        return _comparison_bounds(e)
    if e.op == "or":
        arms = _operands(e, "or")
        unless = tuple(x for x in arms if level(x) in ("uniform", "row"))
        found = [_bounds_of(x) for x in arms if level(x) not in ("uniform", "row")]
        if not found or any(f is None or len(f) != 1 for f in found):
            return None
        bounds = [f[0] for f in found]  # type: ignore[index]
        if len({b.upper for b in bounds}) != 1 or any(b.unless for b in bounds):
            return None
        return [Bound(bounds[0].upper, tuple(a for b in bounds for a in b.alts), unless)]
    return None


def tile_extreme(a: Linear, *, maximize: bool) -> Linear | None:
    """The largest (or smallest) value of `a` over a query tile's rows, `a` with q_idx replaced by the
    tile's first or last row (`Q_LO`, `Q_HI`) as its coefficient's sign says; None when another term
    varies per row (a per-row table read)."""
    coef = sum(sg for sg, t in a.terms if t == Q_IDX)
    rest = [(sg, t) for sg, t in a.terms if t != Q_IDX]
    if any(level(t) != "uniform" for _, t in rest):
        return None
    row = Q_HI if (coef >= 0) == maximize else Q_LO
    return Linear((*rest, *((1 if coef > 0 else -1, row) for _ in range(abs(coef)))), a.offset)


@dataclass(frozen=True, slots=True)
class TileRange:
    """Over a query tile: every kept key lies in [max(0, max(lo_min)), min(seqlen_k − 1, min(hi_max))]
    (each entry one bound's alternatives at their extreme rows; a min over the rows of a max of bounds
    is at least the max of their mins, so the range may be wider than the kept keys, never narrower).
    `exact`: every mask is a bound, every bound entered and at most one in each direction, so the ends
    are the tile's own: a search for empty key blocks at the ends finds none, unless the rows keep no
    key at all (a window of 0), which the kernels' trims of the range catch one block at a time.
    `lo_max` / `hi_min` (when exact): every row keeps every key in [max(0, max(lo_max)), min(seqlen_k − 1,
    min(hi_min))], each entry one bound's alternatives at the other extreme rows (a max over the rows of a
    min of bounds is at most the min of their maxes, so this run may be narrower than the keys every row
    keeps, never wider): the key blocks inside it need no mask."""

    lo_min: tuple[tuple[Linear, ...], ...]
    hi_max: tuple[tuple[Linear, ...], ...]
    exact: bool
    lo_max: tuple[tuple[Linear, ...], ...] = ()
    hi_min: tuple[tuple[Linear, ...], ...] = ()


def tile_range(cb: ColumnBounds) -> TileRange:
    """The key range of a query tile from the masks' bounds, in closed form (`tile_extreme`)."""
    lo: list[tuple[Linear, ...]] = []
    hi: list[tuple[Linear, ...]] = []
    lo_full: list[tuple[Linear, ...]] = []
    hi_full: list[tuple[Linear, ...]] = []
    exact = not cb.rest
    for b in cb.bounds:
        # an upper bound is the max of its alternatives: its largest value over the rows is the max of
        # theirs; a lower bound, the min of its alternatives' smallest
        alts = [tile_extreme(a, maximize=b.upper) for a in b.alts]
        inner = [tile_extreme(a, maximize=not b.upper) for a in b.alts]
        if b.unless or any(x is None for x in alts + inner):
            exact = False  # a bound a row may drop, or one read per row: left to the interval tests
            continue
        (hi if b.upper else lo).append(tuple(x for x in alts if x is not None))
        (hi_full if b.upper else lo_full).append(tuple(x for x in inner if x is not None))
    exact = exact and len(lo) <= 1 and len(hi) <= 1
    if not exact:
        return TileRange(tuple(lo), tuple(hi), False)
    return TileRange(tuple(lo), tuple(hi), True, tuple(lo_full), tuple(hi_full))


@dataclass(frozen=True, slots=True)
class KeyBits:
    """A mask conjunct as a set of each row's keys: bounds on kv_idx (`bound`), conditions that hold for a
    whole row or none (`row`: per-row or uniform), conditions of the key alone (`col`: a per-key table
    read, gathered into bits once a block), and `and` / `or` of those (`args`). The score loops render it
    as bit operations on the row's column masks, so a score tests one bit."""

    op: str  # "bound", "row", "col", "and", "or"
    bound: Bound | None = None
    cond: Expr | None = None
    args: tuple[KeyBits, ...] = ()

    def leaves(self) -> list[Bound]:
        if self.bound is not None:
            return [self.bound]
        return [b for a in self.args for b in a.leaves()]

    def roots(self) -> list[Expr]:
        own = [self.cond] if self.cond is not None else []
        below = [r for a in self.args for r in a.roots()]
        return own + (self.bound.roots() if self.bound is not None else []) + below


def _key_bits(e: Expr) -> KeyBits | None:
    if not (isinstance(e, Op) and e.type == BOOL):
        return None
    if level(e) in ("uniform", "row"):
        return KeyBits("row", cond=e)
    if e.op in ("and", "or"):
        arms = [_key_bits(x) for x in _operands(e, e.op)]
        if all(a is not None for a in arms):
            return KeyBits(e.op, args=tuple(a for a in arms if a is not None))
    elif e.op in ("le", "lt", "ge", "gt"):
        got = _comparison_bounds(e)
        if got is not None:
            parts = tuple(KeyBits("bound", bound=b) for b in got)
            return parts[0] if len(parts) == 1 else KeyBits("and", args=parts)
    # a condition of the key alone that is no bound: its bits are gathered once a block
    return KeyBits("col", cond=e) if level(e) == "col" else None


def key_bits(e: Expr) -> KeyBits | None:
    """`e` (a conjunct `column_bounds` left in `rest`) as `KeyBits` with at least one bound, or None. A
    per-key arm (global + sliding's `is_global[kv_idx]`) is a set of its own: kept per score and or-ed with
    the other arms' bits, its flags sat in predicates (93 P2R in the sm_90 kernel) and the kernel ran 3–5 %
    slower on the H200 (docs/results/2026-12-02-h200-variants-all.json)."""
    whole = _key_bits(e)
    if whole is None or not whole.leaves():
        return None
    return whole


def column_bounds(masks: list[Expr]) -> ColumnBounds:
    """Split the masks' conjunction into per-row bounds of kv_idx and the rest (`column_bounds` above)."""
    bounds: list[Bound] = []
    rest: list[Expr] = []
    for m in (c for mask in masks for c in _operands(mask, "and")):
        got = _bounds_of(m)
        if got is None:
            rest.append(m)
        else:
            bounds.extend(got)
    return ColumnBounds(tuple(bounds), tuple(rest))


@dataclass(frozen=True, slots=True)
class Diagonal:
    """`kv_idx − q_idx ≤ offset` (upper) or `≥ offset` (lower), `offset` uniform, dropped where one of
    `unless` (uniform) holds: one side of a band of diagonals (causal masks, sliding windows)."""

    upper: bool
    offset: Linear
    unless: tuple[Expr, ...] = ()


def diagonal_bounds(cb: ColumnBounds) -> tuple[Diagonal, ...] | None:
    """`cb` as bounds on kv_idx − q_idx, when that is all it is: no other conjunct, and every bound one
    alternative, dropped by uniform conditions only, in which q_idx enters once with coefficient +1
    beside uniform terms.
    A tile then tests each score's kv_idx − q_idx, its thread's first score's plus an offset fixed at
    compile time, against a limit computed once a block. None otherwise."""
    if cb.rest or not cb.bounds:
        return None
    out: list[Diagonal] = []
    for b in cb.bounds:
        if len(b.alts) != 1 or any(level(u) != "uniform" for u in b.unless):
            return None
        a = b.alts[0]
        rest = tuple((sg, t) for sg, t in a.terms if t != Q_IDX)
        if [sg for sg, t in a.terms if t == Q_IDX] != [1] or any(level(t) != "uniform" for _, t in rest):
            return None
        out.append(Diagonal(b.upper, Linear(rest, a.offset), b.unless))
    return tuple(out)


def rendered_score(score: Expr, *, softmax: bool, fast_tanh: bool = False) -> Expr | None:
    """The per-score value the backends render, reassociated and separated: in log2 units under a softmax,
    or None when the score is `s · m` with m uniform and the softmax folds m · log2(e) into its FFMA on raw
    scores. `fast_tanh`: tanh and sigmoid as `lower_transcendentals` leaves them for tanh.approx."""
    score = lower_transcendentals(reassociate(score), fast_tanh)
    if softmax:
        if scale_of(score) is not None:
            return None
        score = log2_score(score)
    return reassociate(separate(reassociate(score)))


@dataclass(frozen=True, slots=True)
class ScoreCost:
    """Instructions per score of the region, outside uniform and per-row subexpressions. `mufu`: SFU
    instructions, of which `exps` are exp2s (inside exp, tanh, sigmoid) that `exp2_fma`, a polynomial on
    the FP32 pipe, can compute instead; `fp32`: FP32-pipe instructions (adds, multiplies, compares, the
    arithmetic around each transcendental)."""

    mufu: int
    exps: int
    fp32: int


# (MUFU, movable exp2s, FP32) per operation of a rendered score: tanh is left there only under
# `fast_tanh`, one tanh.approx (sigmoid is rewritten through it; elsewhere both are lowered to the exp2
# and the reciprocal they cost); a division by a non-uniform value a reciprocal and a multiply.
_OP_COST = {
    "tanh": (1, 0, 0),
    "exp": (1, 1, 1),
    "exp2": (1, 1, 0),
    "log": (1, 0, 1),
    "div": (1, 0, 1),
    "rcp": (1, 0, 0),
    "float": (1, 0, 0),  # I2F issues to the XU pipe, with the SFU's functions
}


def score_cost(e: Expr) -> ScoreCost:
    lv = levels([e])
    mufu = exps = fp32 = 0
    for n in walk(e):
        if not isinstance(n, Op) or lv[n] not in ("col", "elem"):
            continue
        m, x, f = _OP_COST.get(n.op, (0, 0, 1 if n.type == F32 or n.op in ("lt", "le", "gt", "ge") else 0))
        mufu, exps, fp32 = mufu + m, exps + x, fp32 + f
    return ScoreCost(mufu, exps, fp32)


# ---- block classification by interval arithmetic --------------------------------------------------------

# The block rectangle: rows [q_lo, q_hi] and keys [kv_lo, kv_hi], inclusive, clipped to the lengths.
Q_LO, Q_HI = Var("q_lo", I32), Var("q_hi", I32)
KV_LO, KV_HI = Var("kv_lo", I32), Var("kv_hi", I32)


@dataclass(frozen=True, slots=True)
class BlockClass:
    """Two boolean expressions over the block rectangle (and uniform values): `never` true means no
    score of the block is kept (skip it), `always` true means every score is (run it without the mask)."""

    never: Expr
    always: Expr

    @property
    def exact_empty(self) -> bool:
        return not (isinstance(self.never, Const) and self.never.value is False)


def evaluate(e: Expr, env: dict[str, int | float | bool]) -> int | float | bool | None:
    """`e` with the variables of `env` (C's truncated division and remainder), or None where it reads a
    variable `env` lacks or a tensor (unknown at plan time). `and` / `or` decide on a known operand: a
    block test is then known wherever its known part settles it. Compiled once per expression into
    closures (`evaluator`)."""
    return evaluator(e)(env)


Evaluator = Callable[[dict[str, Any]], Any]


@functools.lru_cache(maxsize=4096)
def evaluator(e: Expr) -> Evaluator:
    """`evaluate` for `e` as one function of the environment: the planner takes it once and calls it over
    thousands of block rectangles."""
    if isinstance(e, Const):
        value = e.value
        return lambda env: value
    if isinstance(e, Var):
        name = e.name
        return lambda env: env.get(name)
    if not isinstance(e, Op):
        return lambda env: None  # a tensor read
    args = [evaluator(a) for a in e.args]
    if e.op in ("and", "or"):
        decisive = e.op == "or"  # the operand value that settles it

        def logic(env: dict[str, Any]) -> bool | None:
            unknown = False
            for f in args:
                v = f(env)
                if v is None:
                    unknown = True
                elif bool(v) == decisive:
                    return decisive
            return None if unknown else not decisive

        return logic
    fn: Callable[..., Any] | None = _EVAL_INT.get(e.op) or _EVAL.get(e.op)
    if fn is None:
        return lambda env: None
    integer = e.op in _EVAL_INT

    def apply(env: dict[str, Any]) -> Any:
        vals = [f(env) for f in args]
        if any(v is None for v in vals) or (integer and any(isinstance(v, float) for v in vals)):
            return None  # unknown, or a float division or remainder (not a block test's business)
        return fn(*vals)

    return apply


def _c_div(a: int, b: int) -> int | None:
    return None if b == 0 else (abs(a) // abs(b)) * (1 if (a >= 0) == (b >= 0) else -1)


def _c_mod(a: int, b: int) -> int | None:
    q = _c_div(a, b)
    return None if q is None else a - q * b


_EVAL_INT: dict[str, Callable[..., Any]] = {"div": _c_div, "mod": _c_mod}
_EVAL: dict[str, Callable[..., Any]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "neg": lambda a: -a,
    "abs": abs, "min": min, "max": max, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b, "not": lambda a: not a, "where": lambda c, a, b: a if c else b,
}  # fmt: skip


def block_class(masks: tuple[Expr, ...]) -> BlockClass:
    never: Expr = const(False)
    always: Expr = const(True)
    for m in masks:
        n, a = _tri(m)
        never = op("or", never, n)
        always = op("and", always, a)
    return BlockClass(never=never, always=always)


@functools.lru_cache(maxsize=65536)
def _interval(e: Expr) -> tuple[Expr, Expr] | None:
    """(lo, hi) of an integer expression over the block rectangle, or None when unknown."""
    if e.type != I32:
        return None
    if isinstance(e, Const):
        return e, e
    if isinstance(e, Var):
        if e.name == "q_idx":
            return Q_LO, Q_HI
        if e.name == "kv_idx":
            return KV_LO, KV_HI
        return (e, e) if level(e) == "uniform" else None
    if isinstance(e, Load):
        return (e, e) if is_uniform(e) else None
    args = [_interval(a) for a in e.args]
    if any(a is None for a in args):
        return None
    if e.op == "add":
        (alo, ahi), (blo, bhi) = args  # type: ignore[misc]
        return op("add", alo, blo), op("add", ahi, bhi)
    if e.op == "sub":
        (alo, ahi), (blo, bhi) = args  # type: ignore[misc]
        return op("sub", alo, bhi), op("sub", ahi, blo)
    if e.op == "neg":
        ((lo, hi),) = args  # type: ignore[misc]
        return op("neg", hi), op("neg", lo)
    if e.op == "mul":
        (alo, ahi), (blo, bhi) = args  # type: ignore[misc]
        for (xlo, xhi), c in (((alo, ahi), e.args[1]), ((blo, bhi), e.args[0])):
            if isinstance(c, Const):
                k = int(c.value)
                return (
                    (op("mul", xlo, c), op("mul", xhi, c))
                    if k >= 0
                    else (op("mul", xhi, c), op("mul", xlo, c))
                )
        if is_uniform(e):
            return e, e
        return None
    if e.op in ("min", "max"):
        (alo, ahi), (blo, bhi) = args  # type: ignore[misc]
        return op(e.op, alo, blo), op(e.op, ahi, bhi)
    if e.op == "abs":
        ((lo, hi),) = args  # type: ignore[misc]
        zero = const(0)
        low = op("where", op("ge", lo, zero), lo, op("where", op("le", hi, zero), op("neg", hi), zero))
        return low, op("max", op("neg", lo), hi)
    if is_uniform(e):
        return e, e
    return None


@dataclass(frozen=True, slots=True)
class Saturation:
    """A `min` / `max` node of the score with a uniform bound: where `when` holds over the block rectangle
    (q_lo…q_hi × kv_lo…kv_hi), every score of the block has the node equal to `bound`."""

    node: Expr
    bound: Expr
    when: Expr


def saturations(score: Expr | None, limit: int = 2) -> list[Saturation]:
    """Up to `limit` saturating clamps of the score, outermost first: per-score `min(x, b)` (saturated
    when x ≥ b on the whole block) and `max(x, a)` (when x ≤ a), x an integer with a known interval."""
    if score is None:
        return []
    lv = levels([score])
    out: list[Saturation] = []
    for n in reversed(walk(score)):
        if not (isinstance(n, Op) and n.op in ("min", "max") and n.type == I32 and lv[n] != "uniform"):
            continue
        for x, b in (n.args, n.args[::-1]):
            if lv[b] == "uniform" and lv[x] != "uniform" and (iv := _interval(x)) is not None:
                lo, hi = iv
                when = op("ge", lo, b) if n.op == "min" else op("le", hi, b)
                out.append(Saturation(node=n, bound=b, when=when))
                break
        if len(out) == limit:
            break
    return out


def substitute(e: Expr, node: Expr, by: Expr) -> Expr:
    """`e` with every occurrence of `node` replaced by `by` (constants folded again)."""
    memo: dict[Expr, Expr] = {}
    for n in walk(e):
        if n == node:
            memo[n] = by
        elif isinstance(n, Op):
            memo[n] = op(n.op, *(memo[a] for a in n.args))
        elif isinstance(n, Load):
            memo[n] = Load(n.tensor, tuple(memo[i] for i in n.index), n.type)
        else:
            memo[n] = n
    return memo[e]


@functools.lru_cache(maxsize=65536)
def _tri(e: Expr) -> tuple[Expr, Expr]:
    """(never, always) of a boolean expression over the rectangle; (false, false) when unknown."""
    unknown = (const(False), const(False))
    if e.type != BOOL:
        return unknown
    if isinstance(e, Const):
        return const(not e.value), const(bool(e.value))
    if is_uniform(e):
        return op("not", e), e
    if not isinstance(e, Op):
        return unknown
    if e.op == "not":
        n, a = _tri(e.args[0])
        return a, n
    if e.op in ("and", "or"):
        (n1, a1), (n2, a2) = _tri(e.args[0]), _tri(e.args[1])
        if e.op == "and":
            return op("or", n1, n2), op("and", a1, a2)
        return op("and", n1, n2), op("or", a1, a2)
    if e.op in ("lt", "le", "gt", "ge", "eq", "ne"):
        x, y = e.args
        if x.type != I32 or y.type != I32:
            return unknown
        ix, iy = _interval(x), _interval(y)
        if ix is None or iy is None:
            return unknown
        (xlo, xhi), (ylo, yhi) = ix, iy
        if e.op in ("gt", "ge"):  # x > y  ⇔  y < x
            (xlo, xhi), (ylo, yhi) = (ylo, yhi), (xlo, xhi)
        if e.op in ("lt", "gt"):
            return op("ge", xlo, yhi), op("lt", xhi, ylo)
        if e.op in ("le", "ge"):
            return op("gt", xlo, yhi), op("le", xhi, ylo)
        disjoint = op("or", op("lt", xhi, ylo), op("gt", xlo, yhi))
        point = op("and", op("and", op("eq", xlo, xhi), op("eq", ylo, yhi)), op("eq", xlo, ylo))
        return (disjoint, point) if e.op == "eq" else (point, disjoint)
    return unknown


def uses(e: Expr | None, name: str) -> bool:
    return e is not None and any(isinstance(n, Var) and n.name == name for n in walk(e))


def loads(roots: list[Expr | None]) -> set[str]:
    return {n.tensor for r in roots if r is not None for n in walk(r) if isinstance(n, Load)}


def finite_constant(e: Expr) -> float | None:
    return float(e.value) if isinstance(e, Const) and e.type != BOOL and math.isfinite(e.value) else None


def launch_block_mask(masks: tuple[Expr, ...]) -> str:
    """ "shared" or "per_head" when a mask reads a side tensor at per-row or per-key indices (the block
    classification above cannot bound it, so blocks would all be "partial"); "" otherwise, and for masks
    that read the scores themselves (those are decided per score)."""
    if any(uses(m, "s") for m in masks):
        return ""
    data = any(isinstance(n, Load) and not is_uniform(n) for m in masks for n in walk(m))
    if not data:
        return ""
    per_head = any(uses(m, v) for m in masks for v in ("head_idx", "kv_head_idx"))
    return "per_head" if per_head else "shared"
