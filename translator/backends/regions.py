"""The kernel IR's regions as CUDA, for both backends: the score modification, the masks, the block
classification and the normaliser's epilogue.

Both backends see a score tile through the same (rows, cols) view (`tl::acc_rowcol`) with the same
coordinate tensor, so one renderer serves them. Subexpressions are hoisted by the level they vary at
(`kernel_ir.passes.levels`): per-(batch, head) values once per tile, per-key values into a small array
before the rows, per-row values in the row loop, and only what depends on both inside the column loop.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kernel_ir import passes
from kernel_ir.expr import BOOL, COMPARISONS, F32, I32, Const, Expr, Load, Op, Var, walk
from kernel_ir.program import Forward
from runner.abi import BLOCK_MASK_PARAMS, BLOCK_MASK_THREADS, program_params
from translator.backends.row_helpers import emit_normalize_rows, identity_partition_o
from translator.plan import KernelPlan
from translator.writer import CodeWriter

NEG_INF = "-__int_as_float(0x7f800000)"
LN2 = "0.69314718055994531f"

# Values of the IR's variables in the generated kernels (both backends name them alike).
BINDINGS = {
    "q_idx": "row",
    "kv_idx": "col",
    "head_idx": "bidh",
    "kv_head_idx": "bidh_kv",
    "batch_idx": "bidb",
    "batch": "batch",
    "seqlen_q": "seqlen_q",
    "seqlen_k": "seqlen_k",
    "heads": "heads",
    "heads_kv": "heads_kv",
    "softmax_scale": "softmax_scale",
    "window_left": "window_left",
    "window_right": "window_right",
    "s": "scores(r, c)",
    "q_lo": "q_lo",
    "q_hi": "q_hi",
    "kv_lo": "kv_lo",
    "kv_hi": "kv_hi",
}


def scalar_arg(name: str) -> str:
    return f"scalar_{name}"


def tensor_arg(name: str) -> str:
    return f"{name}_ptr"


@dataclass
class Regions:
    """What the backends emit for one forward program. `fold`: the score is `s · m` with m uniform, so
    the tile keeps raw scores and the softmax folds m · log2(e) into its FFMA (the tuned plain path);
    otherwise the score region writes log2-domain scores and the softmax's factor is 1."""

    ir: Forward
    # exp2s of every eight columns on the FP32 pipe (`tl::exp2_fma`); the rest on the SFU
    fma_exps: int = 0
    fold: Expr | None = None
    temps: dict[Expr, str] = field(default_factory=dict)
    # C of the predicate "this score's exp2s run on the FP32 pipe"; set while the column loop renders
    fma: str = "false"
    # Size names as side-tensor dims, where the kernel's own variables of that name differ (an inference
    # kernel's `seqlen_k` is the sequence's length, its side tensors are laid out by the batch's maximum).
    dims: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.fold = passes.scale_of(passes.reassociate(self.ir.score)) if self.softmax else None

    @property
    def softmax(self) -> bool:
        return self.ir.normalizer == "softmax"

    @property
    def value(self) -> Expr | None:
        """The per-score value the tile holds after the region (None: the raw score stays, folded)."""
        return passes.rendered_score(self.ir.score, softmax=self.softmax, fast_tanh=self.ir.fast_tanh)

    @property
    def masks(self) -> list[Expr]:
        """The masks as the tile evaluates them per score (`kernel_ir.passes.congruences`: a divisibility
        test of an index difference as two hoisted remainders); the reference keeps the program's."""
        return [passes.congruences(m) for m in self.ir.masks]

    @functools.cached_property
    def column_bounds(self) -> passes.ColumnBounds:
        """The masks' per-row bounds of kv_idx (`kernel_ir.passes.column_bounds`): the score loops' column
        limits and the tile's key range read the same split."""
        return passes.column_bounds(self.masks)

    @functools.cached_property
    def diagonal(self) -> tuple[passes.Diagonal, ...] | None:
        """`column_bounds` as bounds on kv_idx − q_idx (`kernel_ir.passes.diagonal_bounds`), or None: the
        backward's masked score loops compare a score's offsets against limits computed once a block."""
        return passes.diagonal_bounds(self.column_bounds)

    @functools.cached_property
    def key_sets(self) -> tuple[tuple[passes.KeyBits, ...], tuple[Expr, ...]]:
        """`column_bounds`' other conjuncts split into those the score loops render as bit sets
        (`kernel_ir.passes.key_bits`) and those they evaluate per score."""
        bits = [(m, passes.key_bits(m)) for m in self.column_bounds.rest]
        return tuple(kb for _, kb in bits if kb is not None), tuple(m for m, kb in bits if kb is None)

    @property
    def has_masks(self) -> bool:
        return bool(self.ir.masks)

    def scale_log2(self) -> str:
        """The softmax's factor from the tile's values to log2 units."""
        if self.fold is None:
            return "1.f"
        return f"{self.c(self.fold)} * 1.44269504088896340736f"

    def lse_factor(self) -> str:
        """Converts a row max as the tile holds it to natural-log units (for the LSE)."""
        return self.c(self.fold) if self.fold is not None else LN2

    # ---- expressions ----

    def c(self, e: Expr) -> str:
        """C for `e`, reading hoisted temporaries where the renderer made them."""
        t = self.temps.get(e)
        if t is not None:
            return t
        if isinstance(e, Const):
            return _const(e)
        if isinstance(e, Var):
            if self.ir.scalar(e.name) is not None:
                return scalar_arg(e.name)
            return BINDINGS[e.name]
        if isinstance(e, Load):
            return f"{tensor_arg(e.tensor)}[{self._offset(e)}]"
        return _op(e.op, [self.c(a) for a in e.args], e, self.fma, fast_tanh=self.ir.fast_tanh)

    def _offset(self, e: Load) -> str:
        """Row-major offset with each index clamped to its dim: rows past seqlen_q and keys past seqlen_k
        (the tiles' padding) and reads under an untaken `where` branch, all computed eagerly, stay inside
        the tensor. Where a clamped value is used, the reference (which raises on it) fails the kernel."""
        dims = [self.dims.get(d, d) if isinstance(d, str) else d for d in self.ir.tensor(e.tensor).dims]
        idx = [f"min(max({self.c(i)}, 0), {d} - 1)" for d, i in zip(dims, e.index, strict=True)]
        out = idx[0]
        for d, i in zip(dims[1:], idx[1:], strict=True):
            out = f"({out}) * {d} + {i}"
        return out

    def hoist(
        self, w: CodeWriter, roots: list[Expr], lv: str, *, prefix: str, col_array: bool = False
    ) -> None:
        """Declare a temporary for every operation of `roots` that varies at level `lv`."""
        levels = passes.levels(roots)
        for r in roots:
            for n in walk(r):
                if n in self.temps or not isinstance(n, Op | Load) or levels[n] != lv:
                    continue
                name = f"{prefix}{len(self.temps)}"
                ty = {F32: "float", I32: "int", BOOL: "bool"}[n.type]
                if col_array:
                    w.line(f"{name}[c] = {self.c(n)};  // {_note(n)}")
                    self.temps[n] = f"{name}[c]"
                else:
                    w.line(f"const {ty} {name} = {self.c(n)};  // {_note(n)}")
                    self.temps[n] = name

    def col_arrays(self, roots: list[Expr]) -> list[tuple[str, Expr]]:
        """The per-key operations of `roots` that get an array (one entry per column of the thread)."""
        levels = passes.levels(roots)
        out: list[tuple[str, Expr]] = []
        seen: set[Expr] = set()
        for r in roots:
            for n in walk(r):
                if isinstance(n, Op | Load) and levels[n] == "col" and n not in seen and n not in self.temps:
                    seen.add(n)
                    out.append((f"tl_c{len(self.temps) + len(out)}", n))
        return out


def _note(e: Expr) -> str:
    from kernel_ir.expr import text

    t = text(e)
    return t if len(t) <= 70 else t[:67] + "..."


def _const(e: Const) -> str:
    if e.type == BOOL:
        return "true" if e.value else "false"
    if e.type == I32:
        return str(int(e.value))
    v = float(e.value)
    if math.isinf(v):
        return ("-" if v < 0 else "") + "__int_as_float(0x7f800000)"
    return f"{v!r}f" if "e" in repr(v) or "." in repr(v) else f"{v!r}.f"


_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "lt": "<", "le": "<=", "gt": ">",
          "ge": ">=", "eq": "==", "ne": "!=", "and": "&&", "or": "||"}  # fmt: skip


def _op(name: str, a: list[str], e: Op, fma: str = "false", *, fast_tanh: bool = False) -> str:
    f32 = e.type == F32 or (e.args and e.args[0].type == F32)
    if name == "mod" and _mod_by_uniform(e):
        return f"tl::mod_nonneg({a[0]}, {a[1]})"
    if name in _INFIX:
        return f"({a[0]} {_INFIX[name]} {a[1]})"
    if name == "neg":
        return f"(-{a[0]})"
    if name == "not":
        return f"(!{a[0]})"
    if name == "where":
        return f"({a[0]} ? {a[1]} : {a[2]})"
    if name == "float":
        return f"static_cast<float>({a[0]})"
    if name in ("min", "max"):
        return f"{'f' + name + 'f' if f32 else name}({a[0]}, {a[1]})"
    if name == "abs":
        return f"{'fabsf' if f32 else 'abs'}({a[0]})"
    if name == "relu":
        return f"fmaxf({a[0]}, 0.f)" if f32 else f"max({a[0]}, 0)"
    if name == "tanh":
        return f"tl::tanh_approx({a[0]})" if fast_tanh else f"tl::tanh_exp2({a[0]}, {fma})"
    if name == "sigmoid":
        if fast_tanh:
            return f"fmaf(0.5f, tl::tanh_approx(0.5f * {a[0]}), 0.5f)"
        return f"tl::sigmoid_exp2({a[0]}, {fma})"
    if name == "exp":
        return _exp2(f"{a[0]} * 1.44269504088896340736f", fma)
    if name == "exp2":
        return _exp2(a[0], fma)
    if name == "rcp":
        return f"__fdividef(1.f, {a[0]})"
    if name == "log":
        return f"logf({a[0]})"
    raise ValueError(f"no CUDA for IR op {name!r}")


def _mod_by_uniform(e: Op) -> bool:
    """An integer remainder of a provably non-negative dividend by a divisor that is the same for the whole
    launch (a runtime Scalar): `tl::mod_nonneg`, a multiply-high and one correction against the reciprocal
    the compiler hoists out of the loops, instead of a signed division sequence per use (the dilated
    window's `kv_idx % dil` per key column; docs/performance.md). Constant divisors stay C's `%`."""
    x, d = e.args
    return e.type == I32 and not isinstance(d, Const) and passes.level(d) == "uniform" and passes.nonneg(x)


def _exp2(x: str, fma: str) -> str:
    """2^x on the SFU, or where `fma` (a C predicate) says so on the FP32 pipe."""
    return f"tl::exp2_approx({x})" if fma == "false" else f"tl::exp2_on({x}, {fma})"


# The columns of a score tile a thread holds, relative to its first: 8·(c / 2) + c % 2 for its column
# index c (a pair of neighbours in every eight), in both backends' accumulators (the m16n8 mma.sync tiles
# of warps stacked along M, and wgmma's 64×N ones); tests/translator/test_column_bounds.py checks it
# against CuTe's partitions.
def emit_column_bits(w: CodeWriter) -> None:
    """`column_bits(lo, end, first)`: bits [first, first + 32) of the mask "column offset in [lo, end)",
    indexed by the thread's column index (`tl_keep` in the score loops)."""
    w.comment("how many of a thread's columns lie below offset k (it holds offsets 8·(c / 2) + c % 2)")
    with w.block("CUTE_DEVICE int columns_below(int k)"):
        w.line("k = max(k, 0);")
        w.line("return (k >> 3) * 2 + min(k & 7, 2);")
    w.line()
    w.comment("the thread's columns with offsets in [lo, end) as bits of their index, from index `first` on")
    with w.block("CUTE_DEVICE uint32_t column_bits(int lo, int end, int first)"):
        w.line("const int a = min(max(columns_below(lo) - first, 0), 32);")
        w.line("const int b = min(max(columns_below(end) - first, 0), 32);")
        w.line("return static_cast<uint32_t>(((1ull << b) - 1ull) & ~((1ull << a) - 1ull));")
    w.line()


def emit_region_helpers(w: CodeWriter) -> None:
    """Device functions the score regions call (inside `namespace tl`, after `exp2_approx`)."""
    emit_exp2_fma(w)
    emit_column_bits(w)
    w.comment("x % d for x ≥ 0 and a divisor the same for the whole launch: the quotient from a")
    w.comment("multiply-high by floor((2^32 − 1) / |d|), at most one short (x < 2^32), then one correction;")
    w.comment("the compiler hoists the reciprocal out of the loops. C's x % d for x ≥ 0, d ≠ 0 is x mod |d|.")
    with w.block("CUTE_DEVICE int mod_nonneg(int x, int d)"):
        w.line("const unsigned ux = static_cast<unsigned>(x), ud = static_cast<unsigned>(abs(d));")
        w.line("const unsigned r = ux - __umulhi(ux, 0xffffffffu / ud) * ud;")
        w.line("return static_cast<int>(r >= ud ? r - ud : r);")
    w.line()
    w.comment("tanh and sigmoid from one exp2 and a fast division: exact to a few ulp of fp32 (tanh.approx's")
    w.comment("2^-11 moves a logit near a cap of 30 by up to 1.5e-2; `Param fast_tanh` opts in). `fma`: the")
    w.comment("exp2 runs on the FP32 pipe (a compile-time constant once the column loop is unrolled).")
    with w.block("CUTE_DEVICE float tanh_exp2(float x, bool fma)"):
        w.line("const float e = exp2_on(2.88539008177792681f * x, fma);  // e^(2x)")
        w.line("return 1.f - __fdividef(2.f, e + 1.f);")
    w.line()
    with w.block("CUTE_DEVICE float sigmoid_exp2(float x, bool fma)"):
        w.line("return __fdividef(1.f, 1.f + exp2_on(-1.44269504088896340736f * x, fma));")
    w.line()
    w.comment("`Param fast_tanh`: one SFU instruction (MUFU.TANH), relative error up to 2^-11, as")
    w.comment("FlashAttention 3 and 4 compute softcap's tanh; the verification measures it against the exact")
    w.comment("reference.")
    with w.block("CUTE_DEVICE float tanh_approx(float x)"):
        w.line("float y;")
        w.line('asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));')
        w.line("return y;")
    w.line()


# 2^f on [-1/2, 1/2] as 1 + f·(c1 + f·(c2 + f·(c3 + f·c4))): a near-minimax fit of the relative error
# (max 2.9e-6 in float32 Horner, against the 2^-8 / 2^-11 of the bf16 / fp16 P it feeds); c0 = 1 exactly,
# so the clamp's 2^-127 comes out as +0, as ex2.approx.ftz gives for -inf.
EXP2_POLY = (0.009582852944731712, 0.055906426161527634, 0.24024099111557007, 0.6931241750717163)


def emit_exp2_fma(w: CodeWriter) -> None:
    """`exp2_fma`: 2^x on the FP32 pipe; `exp2_on` picks it or the SFU's `exp2_approx`."""
    w.comment("2^x without the SFU, for the share of exp2s the cost model moves to the FP32 pipe: round x")
    w.comment("with the 1.5·2^23 shifter, a degree-4 polynomial of the fraction, the integer part added to")
    w.comment("the exponent field. x clamps to [-127, 127]: 2^-127 is +0, 2^127 stands in for overflow.")
    with w.block("CUTE_DEVICE float exp2_fma(float x)"):
        w.line("x = fminf(fmaxf(x, -127.f), 127.f);")
        w.line("const float t = x + 12582912.f;  // round(x) in t's low mantissa bits")
        w.line("const float f = x - (t - 12582912.f);  // in [-1/2, 1/2]")
        c4, c3, c2, c1 = EXP2_POLY
        w.line(f"float p = fmaf(f, {c4!r}f, {c3!r}f);")
        w.line(f"p = fmaf(p, f, {c2!r}f);")
        w.line(f"p = fmaf(p, f, {c1!r}f);")
        w.line("p = fmaf(p, f, 1.f);")
        w.line("return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));")
    w.line()
    with w.block("CUTE_DEVICE float exp2_on(float x, bool fma)"):
        w.line("return fma ? exp2_fma(x) : exp2_approx(x);")
    w.line()


def fma_predicate(fma_exps: int, col: str = "c") -> str:
    """C of "column `col`'s exp2s run on the FP32 pipe": `fma_exps` of every eight columns."""
    if fma_exps <= 0:
        return "false"
    if fma_exps >= 8:
        return "true"
    return f"(({col}) & 7) < {fma_exps}" if " " in col else f"({col} & 7) < {fma_exps}"


def emit_block_rectangle(
    w: CodeWriter,
    first: str = "n_block",
    end: str = "(n_block + 1)",
    q_first: str = "m_block",
    q_end: str = "(m_block + 1)",
) -> None:
    """`q_lo`…`q_hi` × `kv_lo`…`kv_hi`: the query blocks [q_first, q_end) and key blocks [first, end),
    inclusive and clipped to the lengths, as `kernel_ir.passes`' interval arithmetic names them (Q_LO …
    KV_HI)."""
    w.line(f"const int q_lo = {q_first} * kBlockM;")
    w.line(f"const int q_hi = min(seqlen_q, {q_end} * kBlockM) - 1;")
    w.line(f"const int kv_lo = {first} * kBlockN;")
    w.line(f"const int kv_hi = min(seqlen_k, {end} * kBlockN) - 1;")


def block_mask_read(ir: Forward, m_blocks: str, n_blocks: str) -> str:
    """C of the launch-time class of block (m_block, n_block) of this (batch, head), as `_block_mask`
    writes them: (batch, heads or 1, m_blocks, n_blocks) bytes."""
    head, heads = ("bidh", "heads") if ir.block_mask == "per_head" else ("0", "1")
    return (
        f"block_mask_ptr[((static_cast<long long>(bidb) * {heads} + {head}) * {m_blocks} + m_block) * "
        f"{n_blocks} + n_block]"
    )


def emit_trim_by_probes(w: CodeWriter, lo: str, hi: str) -> None:
    """Narrow the blocks [lo, hi) to their first and last kept one by `block_class` read from a launch-time
    block mask: eight classes a step (independent loads, one memory latency per eight blocks), then the
    caller's one at a time."""
    w.comment("the range: skip empty blocks at both ends, eight classes a step (independent loads,")
    w.comment("one memory latency per eight blocks), then one at a time")
    for cond, step, probe in (
        (f"{lo} + 8 <= {hi}", f"{lo} += 8", f"{lo} + i"),
        (f"{hi} - 8 >= {lo}", f"{hi} -= 8", f"{hi} - 1 - i"),
    ):
        with w.block(f"while ({cond})"):
            w.line("int kept = 0;")
            w.line("CUTE_UNROLL")
            w.line(f"for (int i = 0; i < 8; ++i) kept |= block_class({probe});")
            w.line("if (kept) break;")
            w.line(f"{step};")


def emit_score_lambda(
    w: CodeWriter,
    reg: Regions,
    *,
    tag_line: int | None,
    row: str | None = None,
) -> None:
    """`apply_score(acc_s, n_block, masked)`: the score region on every score of one key block and, when
    `masked` (a compile-time flag: blocks the classification could not prove whole), the masks and the
    seqlen_k tail. Masked scores become −∞ under a softmax and 0 without one. `row`: the query row of the
    tile's row r where it is not the tile's (a packed GQA tile holds several heads of each row).

    A block on which a clamp of the score saturates (`kernel_ir.passes.saturations`, tested once a block
    over its rectangle of rows and keys) runs the region with the clamp's bound in its place."""
    value = reg.value
    sats = passes.saturations(value) if row is None else []
    row = row or "m_block * kBlockM + get<0>(coords(r, 0))"
    lam = "auto apply_score = [&](auto& acc_s, int n_block, auto masked)"
    with w.tl(tag_line, "the score region and the masks, on one key block"), w.block(lam, "};"):
        w.line("Tensor scores = make_tensor(acc_s.data(), tl::acc_rowcol(acc_s.layout()));  // (rows, cols)")
        w.line("Tensor coords = make_tensor(tScS.data(), tl::acc_rowcol(tScS.layout()));  // (row, col)s")
        w.line("constexpr int kCols = decltype(size<1>(scores))::value;")
        if not sats:
            _score_loops(w, reg, value, row)
            return
        w.comment("the block's rectangle of rows and keys: where a clamp of the score saturates on all of")
        w.comment("it, the clamp's bound stands in (a table read at the clamped index: once a block)")
        emit_block_rectangle(w)
        for i, sat in enumerate(sats):
            head = "if" if i == 0 else "} else if"
            w.line(f"{head} ({reg.c(sat.when)}) {{  // {_note(sat.node)} = {_note(sat.bound)}")
            with w.indent():
                _score_loops(w, reg, passes.substitute(value, sat.node, sat.bound), row, block=True)
        w.line("} else {")
        with w.indent():
            _score_loops(w, reg, value, row)
        w.line("}")


def emit_key_arrays(
    w: CodeWriter,
    reg: Regions,
    arrays: list[tuple[str, Expr]],
    col_of: str,
    *,
    decls: list[str] | None = None,
    more: Callable[[], None] | None = None,
) -> None:
    """`Regions.col_arrays`' per-key values as arrays over the thread's columns c (kCols of them), computed
    once per block before the row loop, which then reads `name[c]`; `col_of`: the coordinate of a score's
    key (`get<1>`, or `get<0>` where the tile is transposed); `decls`, `more`: further declarations and
    lines of the same loop."""
    w.comment("per-key values, once per block for all of this thread's rows")
    for name, n in arrays:
        ty = {F32: "float", I32: "int", BOOL: "bool"}[n.type]
        w.line(f"{ty} {name}[kCols];")
    for line in decls or []:
        w.line(line)
    w.line("CUTE_UNROLL")
    with w.block("for (int c = 0; c < kCols; ++c)"):
        w.line(f"const int col = n_block * kBlockN + {col_of}(coords(0, c));")
        for name, n in arrays:
            w.line(f"{name}[c] = {reg.c(n)};  // {_note(n)}")
            reg.temps[n] = f"{name}[c]"
        if more is not None:
            more()


def _score_loops(w: CodeWriter, reg: Regions, value: Expr | None, row: str, *, block: bool = False) -> None:
    """The column arrays and the row and column loops of `apply_score` for one form of the score region;
    `block`: the form's uniform values not hoisted per tile are read once here (a saturated clamp's)."""
    cb = reg.column_bounds
    sets, per_score = reg.key_sets
    limited = bool(cb.bounds or sets) and _key_compares(per_score) <= MAX_COMPARES_BESIDE_LIMITS
    masks = list(per_score) if limited else reg.masks
    bound_roots = [t for b in cb.bounds for t in b.roots()] + [t for kb in sets for t in kb.roots()]
    bound_roots = bound_roots if limited else []
    roots = ([value] if value is not None else []) + masks + bound_roots
    dead = NEG_INF if reg.softmax else "0.f"
    before = set(reg.temps)
    if block:
        reg.hoist(w, roots, "uniform", prefix="tl_b")
    arrays = reg.col_arrays(roots)
    conds = [k.cond for s in sets for k in _col_sets(s) if k.cond is not None]
    col_sets = {cond: f"tl_kb{i}" for i, cond in enumerate(conds)}
    if arrays or col_sets:

        def set_bits() -> None:
            for cond, name in col_sets.items():
                w.line(f"{name}[c / 32] |= static_cast<uint32_t>({reg.c(cond)}) << (c % 32);")

        bits = "= {};  // a per-key condition as bits of c"
        decls = [f"uint32_t {name}[(kCols + 31) / 32] {bits}" for name in col_sets.values()]
        emit_key_arrays(w, reg, arrays, "get<1>", decls=decls, more=set_bits)
    w.line("CUTE_UNROLL")
    with w.block("for (int r = 0; r < size<0>(scores); ++r)"):
        w.line(f"const int row = {row};")
        reg.hoist(w, roots, "row", prefix="tl_r")
        if limited:
            _emit_column_limits(w, reg, cb, sets, col_sets)
        w.line("CUTE_UNROLL")
        with w.block("for (int c = 0; c < kCols; ++c)"):
            w.line("const int col = n_block * kBlockN + get<1>(coords(r, c));")
            if reg.fma_exps:
                w.line(f"const bool tl_fma = {fma_predicate(reg.fma_exps)};  // exp2s on the FP32 pipe")
                reg.fma = "tl_fma"
            reg.hoist(w, roots, "elem", prefix="tl_e")
            if value is not None:
                w.line(f"float x = {reg.c(value)};")
            else:
                w.line("float x = scores(r, c);")
            reg.fma = "false"
            keep = " && ".join(reg.c(m) for m in masks) or "true"
            with w.block("if constexpr (decltype(masked)::value)"):
                if limited:
                    inside = "(tl_keep[c / 32] >> (c % 32)) & 1u"
                    w.line(f"if (!({inside}{'' if keep == 'true' else ' && ' + keep})) x = {dead};")
                else:
                    w.line(f"if (col >= seqlen_k || !({keep})) x = {dead};")
            w.line("scores(r, c) = x;")
    for n in [n for n in reg.temps if n not in before]:
        del reg.temps[n]


# The row's column limits (its bit masks) replace the masks' index arithmetic only when at most this many
# other compares per key stay per score beside them. Measured when the limits were compares against
# immediates: with two more (sink tokens + window's `or`, now bit sets) the sm_90 kernel ran out of
# predicate registers (153 P2R, 4576 instructions against 3848; 5–7 % slower on the H200,
# docs/results/2026-12-01-h200-variants-column-limits.json); one (a document id, the dilated window's
# remainders) cost nothing (document mask 4160 → 4128 instructions, dilated window +7 %). Not re-measured
# with the bit masks.
MAX_COMPARES_BESIDE_LIMITS = 1


def _key_compares(masks: tuple[Expr, ...]) -> int:
    """Comparisons that vary per key (per-score, or per-key flags held across the rows)."""
    lv = passes.levels(list(masks))
    nodes = {n for m in masks for n in walk(m)}
    return sum(1 for n in nodes if isinstance(n, Op) and n.op in COMPARISONS and lv[n] in ("col", "elem"))


def linear_c(reg: Regions, a: passes.Linear) -> str:
    """A bound's sum in 64 bits (its terms as the masks evaluate them)."""
    out = ""
    for sign, t in a.terms:
        term = f"static_cast<long long>({reg.c(t)})"
        out = term if not out and sign > 0 else f"{out} {'+' if sign > 0 else '-'} {term}".lstrip()
    if a.offset or not out:
        out = f"{out} {'+' if a.offset >= 0 else '-'} {abs(a.offset)}LL" if out else f"{a.offset}LL"
    return out


def _bound_c(reg: Regions, alts: tuple[passes.Linear, ...], *, upper: bool) -> str:
    """A bound's value, the max (an upper bound) or min (a lower one) of its alternatives, in 64 bits."""
    out = linear_c(reg, alts[0])
    for a in alts[1:]:
        out = f"cute::{'max' if upper else 'min'}({out}, {linear_c(reg, a)})"
    return out


def _col_sets(kb: passes.KeyBits) -> list[passes.KeyBits]:
    """The per-key conditions in `kb` (gathered into bits before the rows)."""
    return [kb] if kb.op == "col" else [k for a in kb.args for k in _col_sets(a)]


def _emit_column_limits(
    w: CodeWriter,
    reg: Regions,
    cb: passes.ColumnBounds,
    sets: Sequence[passes.KeyBits],
    col_sets: dict[Expr, str],
) -> None:
    """This row's kept keys as one interval [lo, hi] of the block's columns, relative to the thread's
    first column (`kernel_ir.passes.column_bounds`); keys past seqlen_k are the upper end's first bound.
    Then `tl_keep`, the interval as bits of the thread's column index, and-ed with the bits of every
    conjunct in `sets` (`kernel_ir.passes.key_bits`: and / or of bounds and row conditions)."""
    w.comment("the masks' bounds on kv_idx as this row's interval of kept columns (64-bit: exact)")
    w.line("long long tl_lo64 = 0;")
    w.line("long long tl_hi64 = static_cast<long long>(seqlen_k) - 1;  // keys past seqlen_k: never kept")
    for b in cb.bounds:
        var, better = ("tl_hi64", "cute::min") if b.upper else ("tl_lo64", "cute::max")
        line = f"{var} = {better}({var}, {_bound_c(reg, b.alts, upper=b.upper)});"
        if b.unless:
            cond = " || ".join(reg.c(u) for u in b.unless)
            line = f"if (!({cond})) {line}"
        w.line(line)
    w.line("const int tl_col0 = get<1>(coords(r, 0));")
    w.line("const long long tl_base = static_cast<long long>(n_block) * kBlockN + tl_col0;")
    w.line("const long long tl_n = kBlockN;  // the limits clamped to ±kBlockN fit an int")
    w.line("const int tl_lo = static_cast<int>(cute::max(cute::min(tl_lo64 - tl_base, tl_n), -tl_n));")
    w.line("const int tl_hi = static_cast<int>(cute::max(cute::min(tl_hi64 - tl_base, tl_n), -tl_n));")
    leaf: dict[int, str] = {}
    for kb in sets:
        for b in kb.leaves():
            if id(b) not in leaf:
                leaf[id(b)] = name = f"tl_b{len(leaf)}"
                value = f"{_bound_c(reg, b.alts, upper=b.upper)} - tl_base"
                w.line(f"const int {name} = static_cast<int>(cute::max(cute::min({value}, tl_n), -tl_n));")
    w.comment("the interval as bits of the thread's column index c (FlashAttention 4's R2P mask): a score")
    w.comment("then tests one bit at a constant position (one LOP3 with a predicate result) instead of")
    w.comment("comparing its column with the limits")
    w.line("uint32_t tl_keep[(kCols + 31) / 32];")
    parts = (_bits_c(reg, kb, leaf, col_sets) for kb in sets)
    keep = " & ".join(["tl::column_bits(tl_lo, tl_hi + 1, 32 * i)", *parts])
    w.line("CUTE_UNROLL")
    w.line(f"for (int i = 0; i < (kCols + 31) / 32; ++i) tl_keep[i] = {keep};")


def _bits_c(reg: Regions, kb: passes.KeyBits, leaf: dict[int, str], cols: dict[Expr, str]) -> str:
    """The 32 bits from column index 32 · i on of the keys `kb` keeps (`tl::column_bits` of each bound's
    clamped offset, named in `leaf`; a per-key condition's bits, named in `cols`)."""
    if kb.op == "col":
        assert kb.cond is not None
        return f"{cols[kb.cond]}[i]"
    if kb.op == "row":
        assert kb.cond is not None
        return f"({reg.c(kb.cond)} ? 0xffffffffu : 0u)"
    if kb.op == "bound":
        b = kb.bound
        assert b is not None
        v = leaf[id(b)]
        bits = (
            f"tl::column_bits(-kBlockN, {v} + 1, 32 * i)"
            if b.upper
            else f"tl::column_bits({v}, kBlockN + 1, 32 * i)"
        )
        if b.unless:
            bits = f"({' || '.join(reg.c(u) for u in b.unless)} ? 0xffffffffu : {bits})"
        return bits
    sep = " & " if kb.op == "and" else " | "
    return "(" + sep.join(_bits_c(reg, a, leaf, cols) for a in kb.args) + ")"


def emit_uniforms(w: CodeWriter, reg: Regions, *, tag_line: int | None) -> None:
    """Per-(batch, head) values of every region, once per tile (after bidb, bidh and bidh_kv)."""
    roots = [r for r in (reg.value, *reg.masks, reg.ir.sink, reg.ir.output_scale) if r is not None]
    if reg.fold is not None:
        roots.append(reg.fold)
    lv = passes.levels(roots)
    if not any(lv[n] == "uniform" for r in roots for n in walk(r) if isinstance(n, Op | Load)):
        return
    with w.tl(tag_line, "values of the score region that are one per (batch, head): hoisted"):
        reg.hoist(w, roots, "uniform", prefix="tl_u")


def emit_block_class(w: CodeWriter, reg: Regions, *, tag_line: int | None) -> None:
    """`block_class(n_block)`: 0 when the masks keep no score of the block (skipped), 2 when they keep
    every one and the block ends before seqlen_k (run without the mask), else 1 (masked per score);
    `next_block(n)` is the next lower block that is not skipped. Interval arithmetic over the block's
    rows and keys (`kernel_ir.passes.block_class`)."""
    bc = passes.block_class(reg.ir.masks)
    if reg.ir.block_mask:
        note = "which key blocks the masks empty, cut or keep whole: classified at launch"
        lam = "auto block_class = [&](int n_block) -> int"
        with w.tl(tag_line, note), w.block(lam, "};"):
            m_blocks, n_blocks = "cute::ceil_div(seqlen_q, kBlockM)", "cute::ceil_div(seqlen_k, kBlockN)"
            w.line(f"return {block_mask_read(reg.ir, m_blocks, n_blocks)};")
    else:
        tr = passes.tile_range(reg.column_bounds)
        if tr.exact:
            _emit_exact_range(w, reg, bc, tr, tag_line)
            return
        _interval_class(w, reg, bc, tag_line)
    with w.tl(tag_line):
        if reg.ir.block_mask:
            w.line("auto next_block = [&](int n) {")
            w.line("  do { --n; } while (n >= n_block_min && block_class(n) == 0);")
            w.line("  return n;")
            w.line("};")
        else:
            w.comment("an empty run below n (a sink block far under a window) is crossed by bisection, as")
            w.comment("the range's ends are: a dozen interval tests instead of one per block")
            with w.block("auto next_block = [&](int n)", "};"):
                w.line("--n;")
                w.line("if (n < n_block_min || block_class(n) != 0) return n;")
                w.line("int lo = n_block_min, hi = n;  // the empty run below n + 1 starts in [lo, hi]")
                with w.block("while (lo < hi)"):
                    w.line("const int mid = (lo + hi) / 2;")
                    w.line("if (blocks_empty(mid, n + 1)) hi = mid; else lo = mid + 1;")
                w.line("n = lo - 1;")
                w.line("while (n >= n_block_min && block_class(n) == 0) --n;  // proven empty only alone")
                w.line("return n;")
        tr = passes.tile_range(reg.column_bounds)
        if tr.lo_min or tr.hi_max:
            _emit_tile_range(w, reg, tr)
        if reg.ir.block_mask:
            emit_trim_by_probes(w, "n_block_min", "n_block_max")
        elif not tr.exact:
            w.comment("the range: the longest empty runs of key blocks at both ends by bisection (one")
            w.comment("interval test over a run's union proves each of its blocks empty, and a run that")
            w.comment("passes it passes it shortened), then the blocks only a test of their own proves empty")
            w.line("int n_lo = n_block_min, n_hi = n_block_max;  // the empty suffix starts in [n_lo, n_hi]")
            with w.block("while (n_lo < n_hi)"):
                w.line("const int mid = (n_lo + n_hi) / 2;")
                w.line("if (blocks_empty(mid, n_block_max)) n_hi = mid; else n_lo = mid + 1;")
            w.line("n_block_max = n_lo;")
            w.line("n_lo = n_block_min;  // the empty prefix's end, in [n_lo, n_hi]")
            with w.block("while (n_lo < n_hi)"):
                w.line("const int mid = (n_lo + n_hi + 1) / 2;")
                w.line("if (blocks_empty(n_block_min, mid)) n_lo = mid; else n_hi = mid - 1;")
            w.line("n_block_min = n_lo;")
        w.line("while (n_block_max > n_block_min && block_class(n_block_max - 1) == 0) --n_block_max;")
        w.line("while (n_block_min < n_block_max && block_class(n_block_min) == 0) ++n_block_min;")


def _emit_exact_range(
    w: CodeWriter, reg: Regions, bc: passes.BlockClass, tr: passes.TileRange, tag_line: int | None
) -> None:
    """Every mask is a bound on kv_idx (`TileRange.exact`): the range and the run of key blocks every row
    keeps whole come in closed form, so `block_class` compares a block with the run's ends and
    `next_block` steps down by one (FlashAttention's masked and unmasked iterations), with no interval
    test per block. The interval test (`block_empty`) trims the range's ends once a tile, for rows that
    keep no key at all; a block inside the range that keeps none (only possible where a bound's slope
    in q_idx leaves a gap wider than a block) runs masked, which is correct."""
    note = "which key blocks the masks empty, cut or keep whole: the masks' bounds in closed form"
    with w.tl(tag_line, note), w.block("auto block_empty = [&](int n_block) -> bool", "};"):
        emit_block_rectangle(w)
        w.line(f"return {reg.c(bc.never)};")
    with w.tl(tag_line):
        w.line("int n_full_min = 0, n_full_max = 0;  // the blocks every row keeps whole")
        _emit_tile_range(w, reg, tr, full=True)
        w.line("while (n_block_max > n_block_min && block_empty(n_block_max - 1)) --n_block_max;")
        w.line("while (n_block_min < n_block_max && block_empty(n_block_min)) ++n_block_min;")
        with w.block("auto block_class = [&](int n_block) -> int", "};"):
            w.comment("inside the range: 2 whole (no mask), 1 cut by a bound or by seqlen_k")
            w.line("return n_block >= n_full_min && n_block < n_full_max ? 2 : 1;")
        w.line("auto next_block = [&](int n) { return n - 1; };  // no block of the range is skipped")


def _emit_key_interval(
    w: CodeWriter,
    reg: Regions,
    names: tuple[str, str],
    lower: tuple[tuple[passes.Linear, ...], ...],
    upper: tuple[tuple[passes.Linear, ...], ...],
) -> None:
    """`names` = [max(0, lower bounds), min(seqlen_k − 1, upper bounds)] in 64 bits."""
    lo, hi = names
    w.line(f"long long {lo} = 0, {hi} = static_cast<long long>(seqlen_k) - 1;")
    for var, better, is_upper, entries in ((lo, "max", False, lower), (hi, "min", True, upper)):
        for alts in entries:
            w.line(f"{var} = cute::{better}({var}, {_bound_c(reg, alts, upper=is_upper)});")


def _emit_tile_range(w: CodeWriter, reg: Regions, tr: passes.TileRange, *, full: bool = False) -> None:
    """[n_block_min, n_block_max) narrowed to the key blocks the masks' bounds allow over this query tile
    (`kernel_ir.passes.tile_range`), in 64 bits: a handful of uniform operations, where a bisection over
    interval tests costs a dozen tests on the tile's critical path (the producer's first load waits).
    `full`: also [n_full_min, n_full_max), the blocks inside the keys every row keeps and seqlen_k."""
    w.comment("the range from the masks' bounds on kv_idx over the tile's rows, in closed form (64-bit)")
    w.line("{")
    with w.indent():
        w.line("const int q_lo = m_block * kBlockM;")
        w.line("const int q_hi = min(seqlen_q, (m_block + 1) * kBlockM) - 1;")
        _emit_key_interval(w, reg, ("kv_lo_min", "kv_hi_max"), tr.lo_min, tr.hi_max)
        if full:
            w.comment("the keys every row keeps: the bounds at their other extreme rows")
            _emit_key_interval(w, reg, ("kv_lo_max", "kv_hi_min"), tr.lo_max, tr.hi_min)
            w.line("n_full_min = static_cast<int>((kv_lo_max + kBlockN - 1) / kBlockN);  // kv_lo_max >= 0")
            w.comment("blocks whose last key is at most kv_hi_min (no block when it is below the first)")
            w.line("n_full_max = kv_hi_min < 0 ? 0 : static_cast<int>((kv_hi_min + 1) / kBlockN);")
        with w.block("if (kv_hi_max < kv_lo_min)", "} else {"):
            w.line("n_block_max = n_block_min;  // no row keeps a key")
        with w.indent():
            w.line("n_block_max = static_cast<int>(cute::min(static_cast<long long>(n_block_max), "
                   "kv_hi_max / kBlockN + 1));")  # fmt: skip
            w.line("n_block_min = static_cast<int>(cute::max(static_cast<long long>(n_block_min), "
                   "kv_lo_min / kBlockN));")  # fmt: skip
        w.line("}")
    w.line("}")


def _interval_class(w: CodeWriter, reg: Regions, bc: passes.BlockClass, tag_line: int | None) -> None:
    note = "which key blocks the masks empty, cut or keep whole (interval arithmetic)"

    with w.tl(tag_line, note), w.block("auto block_class = [&](int n_block) -> int", "};"):
        emit_block_rectangle(w)
        w.line(f"if ({reg.c(bc.never)}) return 0;")
        w.line(f"return ({reg.c(bc.always)}) && (n_block + 1) * kBlockN <= seqlen_k ? 2 : 1;")
    with w.tl(tag_line), w.block("auto blocks_empty = [&](int n_first, int n_end) -> bool", "};"):
        w.comment("key blocks [n_first, n_end) keep no score: the same test over their union")
        w.line("if (n_first >= n_end) return true;")
        emit_block_rectangle(w, "n_first", "n_end")
        w.line(f"return {reg.c(bc.never)};")


def emit_block_mask_for(w: CodeWriter, plan: KernelPlan) -> None:
    """Both backends: the launch-time block-mask kernel after the attention kernel, when the program
    has one."""
    if plan.ir.block_mask:
        emit_block_mask_kernel(
            w,
            plan.ir,
            name=plan.kernel_name,
            block_m=plan.block_m,
            block_n=plan.block_n,
            tag_line=plan.line_of("mask_expr"),
        )


def emit_block_mask_kernel(
    w: CodeWriter, ir: Forward, *, name: str, block_m: int, block_n: int, tag_line: int | None
) -> None:
    """`<name>_block_mask`: the masks evaluated over every (query block, key block) tile at launch, one
    byte per block (0: no score kept, 2: every score kept and the block inside seqlen_k, else 1), so the
    attention kernel skips empty blocks and runs whole ones without the mask. Blocks the interval
    classification already proves empty are not evaluated."""
    reg = Regions(ir)  # a fresh renderer: this kernel has its own hoisted values
    masks = list(ir.masks)
    bc = passes.block_class(ir.masks)
    params = [f"{c} {n}" for n, c, _ in BLOCK_MASK_PARAMS]
    params += [f"{c} {n}" for n, c, _ in program_params(ir.to_dict()) if n != "block_mask_ptr"]
    params.append("unsigned char* block_mask")
    heads = "heads" if ir.block_mask == "per_head" else "1"
    w.line()
    with w.tl(tag_line, "the masks' block classification, computed at launch (per-token side tensors)"):
        w.line(f'extern "C" __global__ void __launch_bounds__({BLOCK_MASK_THREADS}) {name}_block_mask(')
        for prm in params[:-1]:
            w.line(f"    {prm},")
        with w.block(f"    {params[-1]})"):
            w.line(f"constexpr int kBlockM = {block_m};")
            w.line(f"constexpr int kBlockN = {block_n};")
            w.comment("one thread block per (key block, query block, batch × heads or batch): thousands of")
            w.comment("small blocks keep every SM busy (a loop over the key blocks left most of them idle)")
            w.line("const int n_block = blockIdx.x;")
            w.line("const int m_block = blockIdx.y;")
            w.line(f"const int bidb = blockIdx.z / {heads};")
            w.line(f"const int bidh = blockIdx.z % {heads};  // 0 when the masks do not depend on the head")
            w.line("const int bidh_kv = bidh / (heads / heads_kv);")
            w.line(
                "unsigned char* out = block_mask + "
                "(static_cast<long long>(blockIdx.z) * gridDim.y + m_block) * gridDim.x + n_block;"
            )
            reg.hoist(w, masks, "uniform", prefix="tl_u")
            emit_block_rectangle(w)
            with w.block(f"if ({reg.c(bc.never)})"):
                w.line("if (threadIdx.x == 0) *out = 0;")
                w.line("return;  // uniform: every thread takes it")
            w.line("int any = 0, all = 1;")

            def accumulate() -> None:  # one score's keep into the block's any / all
                w.line(f"const bool keep = {' && '.join(reg.c(m) for m in masks)};")
                w.line("any |= keep;")
                w.line("all &= keep;")

            if block_n <= BLOCK_MASK_THREADS:
                w.comment("each thread keeps one key column, its per-key values read once, and walks the")
                w.comment("rows with the others of its column (a warp's row values: one broadcast read)")
                w.line(f"constexpr int kRowStep = {BLOCK_MASK_THREADS} / kBlockN;")
                with w.block("if (threadIdx.x < kRowStep * kBlockN)"):
                    w.line("const int col = n_block * kBlockN + threadIdx.x % kBlockN;")
                    w.line("const bool col_in = col < seqlen_k;  // side-tensor reads clamp their indices")
                    reg.hoist(w, masks, "col", prefix="tl_c")
                    with w.block("for (int r = threadIdx.x / kBlockN; r < kBlockM; r += kRowStep)"):
                        w.line("const int row = m_block * kBlockM + r;")
                        w.line("if (row >= seqlen_q) break;  // padding rows are never stored")
                        w.line("if (!col_in) { all = 0; continue; }")
                        reg.hoist(w, masks, "row", prefix="tl_r")
                        accumulate()
            else:
                with w.block("for (int i = threadIdx.x; i < kBlockM * kBlockN; i += blockDim.x)"):
                    w.line("const int row = m_block * kBlockM + i / kBlockN;")
                    w.line("const int col = n_block * kBlockN + i % kBlockN;")
                    w.line("if (row >= seqlen_q) continue;  // padding rows are never stored")
                    w.line("if (col >= seqlen_k) { all = 0; continue; }")
                    accumulate()
            w.line("any = __syncthreads_or(any);")
            w.line("all = __syncthreads_and(all);")
            w.line("if (threadIdx.x == 0) *out = !any ? 0 : (all ? 2 : 1);")


def emit_normalize(w: CodeWriter, reg: Regions, thr_mma: str, coord_layout: str | None = None) -> None:
    """TL `Compute Divide acc_o, rowsum` (softmax, with the sink in the denominator) or the pointwise
    normaliser's output scale; the row LSE where there is a softmax. `coord_layout`: see
    `row_helpers.identity_partition_o`."""
    w.line("Tensor acc_o_rowcol = make_tensor(acc_o.data(), tl::acc_rowcol(acc_o.layout()));")
    if not reg.softmax:
        if reg.ir.output_scale is None:
            w.line("// no softmax: O = P·V as accumulated")
            return
        w.line(f"Tensor tOcO_scale = {identity_partition_o(thr_mma, coord_layout)};")
        w.line("Tensor tOcO_scale_rc = make_tensor(tOcO_scale.data(), tl::acc_rowcol(tOcO_scale.layout()));")
        w.line("CUTE_UNROLL")
        with w.block("for (int r = 0; r < size<0>(acc_o_rowcol); ++r)"):
            w.line("const int row = m_block * kBlockM + get<0>(tOcO_scale_rc(r, 0));")
            reg.hoist(w, [reg.ir.output_scale], "row", prefix="tl_r")
            w.line(f"const float o_scale = {reg.c(reg.ir.output_scale)};")
            w.line("CUTE_UNROLL")
            w.line("for (int c = 0; c < size<1>(acc_o_rowcol); ++c) acc_o_rowcol(r, c) *= o_scale;")
        return
    if reg.ir.sink is None:
        emit_normalize_rows(w, lse_factor=reg.lse_factor(), declare_view=False)
        return
    w.line("Tensor row_lse = make_tensor<float>(Shape<Int<kRowsPerThread>>{});")
    w.line(f"const float sink_log2 = {reg.c(reg.ir.sink)} * 1.44269504088896340736f;  // the sink logit")
    w.line("CUTE_UNROLL")
    with w.block("for (int r = 0; r < size<0>(acc_o_rowcol); ++r)"):
        w.line("float sum = tl::quad_sum(row_sum(r));")
        w.comment("the sink joins the denominator: rescale to max(row max, sink) to stay finite")
        w.line(f"const float m2 = row_max(r) == {NEG_INF} ? {NEG_INF} : row_max(r) * ({reg.scale_log2()});")
        w.line("const float m_all = fmaxf(m2, sink_log2);")
        w.line("const float keep = tl::exp2_approx(m2 - m_all);  // 0 for a row that saw no key")
        w.line("sum = sum * keep + tl::exp2_approx(sink_log2 - m_all);")
        w.line("const float inv_sum = keep / sum;")
        w.line(f"row_lse(r) = (m_all + __log2f(sum)) * {LN2};")
        w.line("CUTE_UNROLL")
        w.line("for (int c = 0; c < size<1>(acc_o_rowcol); ++c) acc_o_rowcol(r, c) *= inv_sum;")
