"""`kernel_ir.passes.column_bounds`: masks that bound kv_idx by a per-row value become one interval of kept
columns per row. The pass must be exact: every (q_idx, kv_idx) keeps the same verdict, checked here by
evaluating the masks and the bounds with Python integers (C's truncated `%`), and the renderer must emit
the interval in place of the masks' per-score arithmetic."""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

import pytest

from kernel_ir import passes
from kernel_ir.expr import I32, Const, Expr, Load, Op, Var, const, op, text
from kernel_ir.program import CAUSAL_MASK, WINDOW_MASKS

ROOT = Path(__file__).resolve().parents[2]
Q, K = Var("q_idx", I32), Var("kv_idx", I32)
SQ, SK = Var("seqlen_q", I32), Var("seqlen_k", I32)
W, DIL, N_SINK = Var("W", I32), Var("dil", I32), Var("n_sink", I32)
DIAG = op("sub", op("add", Q, SK), SQ)
PREFIX = Load("prefix", (Var("batch_idx", I32),), I32)
IS_GLOBAL_Q = op("ne", Load("is_global", (Var("batch_idx", I32), Q), I32), const(0))
IS_GLOBAL_K = op("ne", Load("is_global", (Var("batch_idx", I32), K), I32), const(0))
DILATED = passes.congruences(op("eq", op("mod", op("abs", op("sub", Q, K)), DIL), const(0)))
DOC = op("eq", Load("doc", (Var("batch_idx", I32), Q), I32), Load("doc", (Var("batch_idx", I32), K), I32))

MASKS: dict[str, list[Expr]] = {
    "causal": [CAUSAL_MASK],
    "window header": list(WINDOW_MASKS),
    "sliding window": [CAUSAL_MASK, op("lt", op("sub", DIAG, K), W)],
    "dilated window": [op("and", op("le", op("abs", op("sub", Q, K)), W), DILATED)],
    "prefix lm": [op("or", op("lt", K, PREFIX), op("le", K, DIAG))],
    "bound on the right": [op("ge", op("add", W, Q), K), op("gt", op("neg", K), op("sub", const(-3), Q))],
    "sink + window": [CAUSAL_MASK, op("or", op("lt", K, N_SINK), op("lt", op("sub", DIAG, K), W))],
    "documents": [CAUSAL_MASK, DOC],
    "global row": [op("or", op("le", op("abs", op("sub", Q, K)), W), IS_GLOBAL_Q)],
    "global row, one side": [op("or", op("le", K, op("add", Q, W)), IS_GLOBAL_Q)],
    "global rows and keys": [op("or", op("or", op("le", op("abs", op("sub", Q, K)), W), IS_GLOBAL_Q),
                                IS_GLOBAL_K)],
}  # fmt: skip


def _c_mod(a: int, b: int) -> int:
    r = abs(a) % abs(b)
    return r if a >= 0 else -r


def _eval(e: Expr, env: dict[str, int], tables: dict[str, dict[tuple[int, ...], int]]) -> int | bool:
    if isinstance(e, Const):
        return e.value  # type: ignore[return-value]
    if isinstance(e, Var):
        return env[e.name]
    if isinstance(e, Load):
        return tables[e.tensor][tuple(int(_eval(i, env, tables)) for i in e.index)]
    a = [_eval(x, env, tables) for x in e.args]
    ops = {
        "add": lambda: a[0] + a[1], "sub": lambda: a[0] - a[1], "mul": lambda: a[0] * a[1],
        "neg": lambda: -a[0], "abs": lambda: abs(a[0]), "mod": lambda: _c_mod(a[0], a[1]),
        "min": lambda: min(a[0], a[1]), "max": lambda: max(a[0], a[1]),
        "lt": lambda: a[0] < a[1], "le": lambda: a[0] <= a[1], "gt": lambda: a[0] > a[1],
        "ge": lambda: a[0] >= a[1], "eq": lambda: a[0] == a[1], "ne": lambda: a[0] != a[1],
        "and": lambda: a[0] and a[1], "or": lambda: a[0] or a[1], "not": lambda: not a[0],
    }  # fmt: skip
    assert isinstance(e, Op)
    return ops[e.op]()


def _linear(a: passes.Linear, env: dict[str, int], tables: dict[str, dict[tuple[int, ...], int]]) -> int:
    return sum(sign * int(_eval(t, env, tables)) for sign, t in a.terms) + a.offset


BN = 16  # a key block of the simulated kernel


def _clamp(v: int) -> int:
    return max(min(v, BN), -BN)  # as the kernel clamps a limit before it narrows it to an int


def _local(cb: passes.ColumnBounds, env: dict[str, int], tables: dict, base: int) -> tuple[int, int]:
    """The row's interval as the kernel holds it: relative to `base` (the block's first key plus the
    thread's first column), clamped to ±BN."""
    lo, hi = 0, env["seqlen_k"] - 1
    for b in cb.bounds:
        if any(_eval(u, env, tables) for u in b.unless):
            continue
        vals = [_linear(a, env, tables) for a in b.alts]
        if b.upper:
            hi = min(hi, max(vals))
        else:
            lo = max(lo, min(vals))
    return _clamp(lo - base), _clamp(hi - base)


@pytest.mark.parametrize("name", list(MASKS))
def test_every_pair_keeps_its_verdict(name: str):
    masks = MASKS[name]
    cb = passes.column_bounds(masks)
    rng = random.Random(name)
    for _ in range(40):
        sq, sk = rng.randint(1, 40), rng.randint(1, 40)
        env = {"seqlen_q": sq, "seqlen_k": sk, "batch_idx": 0, "W": rng.randint(-3, 20),
               "dil": rng.choice([1, 2, 3, -2]), "n_sink": rng.randint(0, 5),
               "window_left": rng.randint(-1, 8), "window_right": rng.randint(-1, 8)}  # fmt: skip
        n = max(sq, sk)
        tables = {
            "prefix": {(0,): rng.randint(0, sk)},
            "is_global": {(0, i): int(rng.random() < 0.2) for i in range(n)},
            "doc": {(0, i): i // rng.randint(3, 9) for i in range(n)},
        }
        col0 = rng.randrange(BN // 2)  # the thread's first column in the block
        for q in range(sq):
            env_q = {**env, "q_idx": q}
            for kv in range(sk):
                base = kv // BN * BN + col0 if kv % BN >= col0 else kv // BN * BN  # a column this thread owns
                lo, hi = _local(cb, env_q, tables, base)
                env_qk = {**env_q, "kv_idx": kv}
                want = all(_eval(m, env_qk, tables) for m in masks)
                got = lo <= kv - base <= hi and all(_eval(m, env_qk, tables) for m in cb.rest)
                assert got == want, (name, env_qk, lo, hi)
                # the score loops' form: the interval, the conjuncts `key_bits` renders as bit sets
                # (each bound clamped as the kernel does), the others per score
                sets = [(m, passes.key_bits(m)) for m in cb.rest]
                bits = all(_in_set(kb, env_qk, tables, base) for _, kb in sets if kb is not None)
                per_score = all(_eval(m, env_qk, tables) for m, kb in sets if kb is None)
                assert (lo <= kv - base <= hi and bits and per_score) == want, (name, env_qk)


def _in_set(kb: passes.KeyBits, env: dict[str, int], tables: dict, base: int) -> bool:
    """Whether the key `env["kv_idx"]` is in `kb`'s set as the kernel computes it."""
    k = env["kv_idx"] - base
    if kb.op in ("row", "col"):
        assert kb.cond is not None
        return bool(_eval(kb.cond, env, tables))
    if kb.op == "bound":
        b = kb.bound
        assert b is not None
        if any(_eval(u, env, tables) for u in b.unless):
            return True
        vals = [_linear(a, env, tables) for a in b.alts]
        return k <= _clamp(max(vals) - base) if b.upper else k >= _clamp(min(vals) - base)
    arms = [_in_set(a, env, tables, base) for a in kb.args]
    if kb.op == "and":
        return all(arms)
    return any(arms)


@pytest.mark.parametrize(
    ("name", "leaves"),
    [
        ("sink + window", 2),  # kv < n_sink or a window's lower bound: two bit sets or-ed
        ("global row", 2),  # |q − kv| ≤ W (two bounds) or a per-row flag
        ("global rows and keys", 2),  # and a per-key flag, gathered into bits once a block
        ("documents", 0),  # a document id is no bound: per score
        ("dilated window", 0),
    ],
)
def test_what_becomes_bit_sets(name: str, leaves: int):
    kb = passes.key_bits(passes.column_bounds(MASKS[name]).rest[0])
    if leaves == 0:
        assert kb is None
        return
    assert kb is not None and len(kb.leaves()) == leaves


@pytest.mark.parametrize(
    ("name", "bounds", "rest"),
    [
        ("causal", 1, 0),
        ("window header", 2, 0),
        ("sliding window", 2, 0),
        ("dilated window", 2, 1),
        ("prefix lm", 1, 0),
        ("bound on the right", 2, 0),
        ("sink + window", 1, 1),  # the sinks' `or` mixes an upper and a lower bound: per score
        ("documents", 1, 1),
        ("global row", 0, 1),  # |x| ≤ W is two bounds, so its `or` stays per score
        ("global row, one side", 1, 0),  # an `or` with a per-row condition: the bound unless it holds
    ],
)
def test_what_becomes_a_bound(name: str, bounds: int, rest: int):
    cb = passes.column_bounds(MASKS[name])
    assert (len(cb.bounds), len(cb.rest)) == (bounds, rest), [text(r) for r in cb.rest]


@pytest.mark.parametrize(
    "mask",
    [
        op("le", op("mul", const(2), K), Q),  # kv_idx's coefficient is 2
        op("le", op("add", K, K), Q),  # 2 again, through a sum
        op("le", op("sub", K, K), Q),  # 0: not a bound of kv_idx
        op("le", K, Load("t", (K,), I32)),  # the bound varies per key
        op("eq", K, Q),  # equality: left per score
        op("le", op("abs", op("sub", Q, K)), op("add", K, const(1))),  # the abs bound varies per key
    ],
    ids=["coefficient-2", "k-plus-k", "k-minus-k", "per-key-bound", "equality", "per-key-abs-bound"],
)
def test_it_leaves_what_is_not_a_bound(mask: Expr):
    cb = passes.column_bounds([mask])
    assert cb.bounds == () and cb.rest == (mask,)


def test_a_bound_is_summed_in_64_bits():
    """`diag − kv < W` with W near 2^31: W − diag − 1 does not fit an int; the kernel adds in 64 bits."""
    cb = passes.column_bounds([op("lt", op("sub", DIAG, K), W)])
    (b,) = cb.bounds
    env = {"q_idx": 0, "seqlen_q": 5, "seqlen_k": 3, "W": 2**31 - 1}
    assert not b.upper and _linear(b.alts[0], env, {}) == -2 - (2**31 - 1) + 1


def _sliding_source(target: str) -> str:
    sys.path.insert(0, str(ROOT))
    from pipeline.build import translate_text

    text_ = (ROOT / "examples" / "variants" / "sliding_window.tl").read_text()
    text_ = re.sub(r"(?m)^Target .*$", f"Target {target}", text_)
    return translate_text(text_, Path("sliding_window.tl")).source


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_the_kernel_compares_columns_with_the_row_limits(target: str):
    lam = _sliding_source(target)
    lam = lam[lam.index("auto apply_score") :]
    lam = lam[: lam.index("};")]
    assert "long long tl_lo64 = 0;" in lam and "tl_hi64 = static_cast<long long>(seqlen_k) - 1;" in lam
    assert "scalar_window_size" in lam.split("const int tl_col0")[0]  # the window enters the row's limits
    elem = lam[lam.index("if constexpr (decltype(masked)::value)") :]
    assert "tl_keep[c / 32] >> (c % 32)" in elem  # one bit test of the row's mask per score
    assert "col >= seqlen_k" not in elem and "scalar_window_size" not in elem  # nothing else per score


def test_a_mask_without_bounds_renders_as_before():
    sys.path.insert(0, str(ROOT))
    from pipeline.build import translate_text

    text_ = (ROOT / "examples" / "variants" / "relative_bias.tl").read_text()
    src = translate_text(text_, Path("relative_bias.tl")).source
    lam = src[src.index("auto apply_score") :]
    assert "tl_lo64" not in lam and "if (col >= seqlen_k || !(" in lam


@pytest.mark.parametrize(
    ("variant", "limited"),
    [("sink_tokens_window", True), ("document_mask", True), ("dilated_window", True)],
)
def test_limits_only_beside_at_most_one_other_compare(variant: str, limited: bool):
    """Sink tokens + window: its `or` of two bounds becomes bit sets beside the causal limit (as compares
    against per-row limits the `or` ran the sm_90 kernel out of predicate registers). A document id or the
    dilated window's remainders (one compare per score) sit beside the limits."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.variant_cases import for_shape
    from pipeline.build import translate_text

    text_ = for_shape((ROOT / "examples" / "variants" / f"{variant}.tl").read_text(), "bf16", 128)
    src = translate_text(text_, Path(f"{variant}.tl")).source
    lam = src[src.index("auto apply_score") :]
    lam = lam[: lam.index("};")]
    assert ("tl_keep[c / 32] >> (c % 32)" in lam) == limited
    assert ("col >= seqlen_k ||" in lam) == (not limited)


def test_the_pairs_of_a_small_grid_through_the_reference():
    """The catalogue's banded masks through the IR reference with and without the pass's split agree
    (the reference evaluates the program's masks; the split's rest and interval rebuilt as masks)."""
    torch = pytest.importorskip("torch")
    from kernel_ir.program import Forward, Scalar
    from runner.ir_reference import forward_reference

    for name in ("sliding window", "dilated window", "bound on the right"):
        masks = MASKS[name]
        cb = passes.column_bounds(masks)
        rebuilt: list[Expr] = list(cb.rest)
        for b in cb.bounds:
            for a in b.alts:  # one alternative each in these three
                s: Expr = const(a.offset)
                for sign, t in a.terms:
                    s = op("add" if sign > 0 else "sub", s, t)
                rebuilt.append(op("le", K, s) if b.upper else op("ge", K, s))
        scalars = (Scalar("W", "i32", 9), Scalar("dil", "i32", 3))
        g = torch.Generator().manual_seed(7)
        q = torch.randn(1, 37, 2, 16, generator=g, dtype=torch.float64)
        k, v = (torch.randn(1, 45, 2, 16, generator=g, dtype=torch.float64) for _ in range(2))
        score = op("mul", Var("s", "f32"), Var("softmax_scale", "f32"))
        o1, l1 = forward_reference(Forward(score=score, masks=tuple(masks), scalars=scalars), q, k, v,
                                   dtype=torch.float64)  # fmt: skip
        o2, l2 = forward_reference(Forward(score=score, masks=tuple(rebuilt), scalars=scalars), q, k, v,
                                   dtype=torch.float64)  # fmt: skip
        assert torch.equal(o1, o2) and torch.equal(l1, l2), name


# ---- the key-block walk as the kernels emit it, run on the CPU ----------------------------------------

HARNESS = r"""
#include <algorithm>
#include <cstdio>
namespace cute {
template <class A, class B> auto min(A a, B b) { return a < b ? a : b; }
template <class A, class B> auto max(A a, B b) { return a > b ? a : b; }
inline int ceil_div(int a, int b) { return (a + b - 1) / b; }
}  // namespace cute
using std::max;
using std::min;
int main() {
  int seqlen_q, seqlen_k, m_block, prefix;
  @SCALARS@
  const int batch = 1, bidb = 0;
  const int* prefix_ptr = &prefix;
  constexpr int kBlockM = @BM@, kBlockN = @BN@;
  while (std::scanf("%d %d %d %d@READ@", &seqlen_q, &seqlen_k, &m_block, &prefix@ADDRS@) == 4 + @NSCALARS@) {
    @REGION@
    if (n_block_max <= n_block_min) { std::printf("\n"); continue; }
    for (int n = n_block_max - 1; n >= n_block_min; n = next_block(n))
      std::printf("%d:%d ", n, block_class(n));
    std::printf("\n");
  }
}
"""


EXACT_NEXT = "auto next_block = [&](int n) { return n - 1; };"


def _walk_harness(variant: str, scalars: list[str], target: str) -> str:
    """The kernel's range code (from `n_block_min` through the trims of the range) in a CPU harness that
    reads (seqlen_q, seqlen_k, m_block, prefix, scalars…) lines and prints the key blocks it walks."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.variant_cases import for_shape
    from pipeline.build import translate_text

    text_ = (ROOT / "examples" / "variants" / f"{variant}.tl").read_text()  # sm_80: the file's own tiles
    text_ = (
        for_shape(text_, "bf16", 128)
        if target == "sm_90"
        else re.sub(r"(?m)^Target .*$", "Target sm_80", text_)
    )
    src = translate_text(text_, Path(f"{variant}.tl")).source
    start = src.index("  int n_block_min = 0;")
    end = src.index("++n_block_min;", start) + len("++n_block_min;")
    exact = src.find(EXACT_NEXT, end)  # the closed-form classes follow the trims where the masks are bounds
    if exact != -1 and "++n_block_min;" not in src[end:exact]:
        end = exact + len(EXACT_NEXT)
    # the per-(batch, head) values hoisted before it (the sm_80 kernel declares them first)
    hoisted = re.findall(r"(?m)^\s*const (?:int|bool|float) tl_u\d+ = .*;.*$", src[:start])
    region = "\n".join([*hoisted, *(ln for ln in src[start:end].splitlines() if not ln.startswith("#line"))])
    bm = re.search(r"kBlockM = (\d+);", src)
    bn = re.search(r"kBlockN = (\d+);", src)
    assert bm and bn
    subs = {
        "@SCALARS@": " ".join(f"int scalar_{s};" for s in scalars),
        "@READ@": " %d" * len(scalars),
        "@ADDRS@": "".join(f", &scalar_{s}" for s in scalars),
        "@NSCALARS@": str(len(scalars)),
        "@BM@": bm.group(1),
        "@BN@": bn.group(1),
        "@REGION@": region,
    }
    out = HARNESS
    for k, v in subs.items():
        out = out.replace(k, v)
    return out


WALKS = {  # variant: (its scalars, a mask evaluator, whether the walk must be exactly the kept blocks)
    "sliding_window": (["window_size"], lambda q, kv, e: kv <= q + e["sk"] - e["sq"]
                       and q + e["sk"] - e["sq"] - kv < e["window_size"], True),
    "prefix_lm": ([], lambda q, kv, e: kv < e["prefix"] or kv <= q + e["sk"] - e["sq"], True),
    "sink_tokens_window": (["n_sink", "window_size"], lambda q, kv, e: kv <= q + e["sk"] - e["sq"] and (
        kv < e["n_sink"] or q + e["sk"] - e["sq"] - kv < e["window_size"]), True),
    "dilated_window": (["W", "dil"], lambda q, kv, e: abs(q - kv) <= e["W"]
                       and abs(q - kv) % e["dil"] == 0, False),
}  # fmt: skip


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
@pytest.mark.parametrize("variant", list(WALKS))
def test_the_kernels_walk_every_kept_key_block(variant: str, target: str, tmp_path: Path):
    """The emitted range (closed form, then the bisection where the masks are not all bounds) and
    `next_block`, compiled with g++: every key block with a kept pair is walked, in descending order, with
    class 2 only where every pair is kept; where the masks are affine, exactly those blocks."""
    import shutil
    import subprocess

    if shutil.which("g++") is None:
        pytest.skip("no g++")
    scalars, keep, tight = WALKS[variant]
    src = tmp_path / "walk.cpp"
    src.write_text(_walk_harness(variant, scalars, target))
    exe = tmp_path / "walk"
    subprocess.run(["g++", "-std=c++17", "-O1", "-o", str(exe), str(src)], check=True, capture_output=True)
    text_ = src.read_text()
    bm = int(re.search(r"kBlockM = (\d+)", text_).group(1))  # type: ignore[union-attr]
    bn = int(re.search(r"kBlockN = (\d+)", text_).group(1))  # type: ignore[union-attr]
    rng = random.Random(variant)
    cases = []
    for _ in range(60):
        sq, sk = rng.choice([1, 7, 130, 300, 513]), rng.choice([1, 9, 128, 300, 700])
        env = {
            "sq": sq,
            "sk": sk,
            "prefix": rng.randint(0, sk + 3),
            "window_size": rng.choice([0, 1, 5, 64, 200, 10**9]),
            "n_sink": rng.choice([0, 1, 4, 130]),
            "W": rng.choice([0, 3, 100, 2**31 - 1]),
            "dil": rng.choice([1, 2, 3]),
        }
        for m in range(-(-sq // bm)):
            cases.append((env, m))
    lines = "".join(f"{e['sq']} {e['sk']} {m} {e['prefix']} " + " ".join(str(e[s]) for s in scalars) + "\n"
                    for e, m in cases)  # fmt: skip
    out = subprocess.run(
        [str(exe)], input=lines, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(out) == len(cases)
    for (env, m), got_line in zip(cases, out, strict=True):
        walked = [tuple(map(int, x.split(":"))) for x in got_line.split()]
        assert [n for n, _ in walked] == sorted({n for n, _ in walked}, reverse=True), (env, m, walked)
        rows = range(m * bm, min(env["sq"], (m + 1) * bm))
        for n in range(-(-env["sk"] // bn)):
            cols = range(n * bn, min(env["sk"], (n + 1) * bn))
            kept = [keep(q, kv, env) for q in rows for kv in cols]
            cls = dict(walked).get(n)
            if any(kept):
                assert cls in (1, 2), (variant, env, m, n, walked)
            elif tight and env["window_size"] > 0:  # a window of 0 keeps no key: interval tests miss that
                assert cls is None, (variant, env, m, n, walked)
            if cls == 2:
                assert all(kept) and len(cols) == bn, (variant, env, m, n)


@pytest.mark.parametrize("coef", [-2, -1, 0, 1, 2])
def test_a_bound_at_the_tiles_extreme_row_is_its_extreme(coef: int):
    """`tile_extreme`: the bound `kv_idx ≤ coef·q_idx + seqlen_k − W` (and ≥) over rows q_lo…q_hi takes
    its max (min) at the row its coefficient's sign picks."""
    q_term: Expr = const(0)
    for _ in range(abs(coef)):
        q_term = op("add" if coef > 0 else "sub", q_term, Q)
    rhs = op("sub", op("add", q_term, SK), W)
    for upper in (True, False):
        cb = passes.column_bounds([op("le", K, rhs) if upper else op("ge", K, rhs)])
        ((b,),) = [cb.bounds]
        ext = passes.tile_extreme(b.alts[0], maximize=upper)
        assert ext is not None
        for q_lo, q_hi in ((0, 127), (256, 300), (5, 5)):
            env = {"seqlen_k": 1000, "W": 17, "q_lo": q_lo, "q_hi": q_hi}
            rows = [_linear(b.alts[0], {**env, "q_idx": q}, {}) for q in range(q_lo, q_hi + 1)]
            assert _linear(ext, env, {}) == (max(rows) if upper else min(rows)), (coef, upper, q_lo, q_hi)


def test_a_bound_read_per_row_has_no_closed_form():
    doc_q = Load("doc", (Var("batch_idx", I32), Q), I32)
    cb = passes.column_bounds([op("le", K, doc_q), CAUSAL_MASK])
    tr = passes.tile_range(cb)
    assert len(cb.bounds) == 2 and len(tr.hi_max) == 1 and not tr.exact  # the causal bound alone enters


PATTERN_HARNESS = r"""
#include <cstdio>
#include <cstdint>
#include <cute/tensor.hpp>
using namespace cute;
using std::max;
using std::min;
namespace tl {
@HELPERS@
}  // namespace tl
struct Traits {
@TRAITS@
};
int main() {
  constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN;
  typename Traits::@MMA@ tiled_mma;
  int bad = 0;
  for (int t = 0; t < @THREADS@; ++t) {
    auto thr = tiled_mma.get_thread_slice(t);
    Tensor tScS = thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
    Tensor coords = make_tensor(tScS.data(), tl::acc_rowcol(tScS.layout()));
    constexpr int kCols = decltype(size<1>(coords))::value;
    for (int r = 0; r < size<0>(coords); ++r) {
      const int col0 = get<1>(coords(r, 0));
      for (int lo = -kBlockN; lo <= kBlockN; ++lo)
        for (int end = -kBlockN + 1; end <= kBlockN + 1; end += (t == 0 && r == 0 ? 1 : 37)) {
          uint32_t keep[(kCols + 31) / 32];
          for (int i = 0; i < (kCols + 31) / 32; ++i) keep[i] = tl::column_bits(lo, end, 32 * i);
          for (int c = 0; c < kCols; ++c) {
            const int k = get<1>(coords(r, c)) - col0;
            const bool want = k >= lo && k < end, got = (keep[c / 32] >> (c % 32)) & 1u;
            if (want != got && bad++ < 5)
              std::printf("t %d r %d c %d offset %d [%d, %d): %d\n", t, r, c, k, lo, end, got);
          }
        }
    }
  }
  std::printf("%d\n", bad);
}
"""


def _pattern_harness(path: str, target: str) -> tuple[str, int]:
    """The kernel's tiled MMA, `tl::acc_rowcol` and the column-bit helpers in a host harness that checks
    the bits every thread's scores test against their columns' offsets (CuTe's partitions on the CPU)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.variant_cases import for_shape
    from pipeline.build import translate_text

    text_ = (ROOT / "examples" / path).read_text()
    if target == "sm_90":
        text_ = for_shape(text_, "bf16", 128)
    else:
        text_ = re.sub(r"(?m)^Target .*$", "Target sm_80", text_)
    src = translate_text(text_, Path(Path(path).name)).source
    consts = re.findall(r"(?m)^\s*(static constexpr int (?:kBlockM|kBlockN|kNWarps|kConsumers) = \d+;)", src)
    mma = "TiledMmaQK" if target == "sm_90" else "TiledMma"
    typedef = re.search(rf"(?s)using {mma} = .*?;", src)
    helpers = [re.search(rf"(?s)(template <class Layout>\s*)?CUTE_DEVICE [^\n]*\b{name}\(.*?\n  }}\n", src)
               for name in ("acc_rowcol", "columns_below", "column_bits")]  # fmt: skip
    assert typedef and all(helpers), path
    n = dict(re.findall(r"static constexpr int (kNWarps|kConsumers) = (\d+);", src))
    threads = 128 * int(n["kConsumers"]) if target == "sm_90" else 32 * int(n["kNWarps"])
    out = PATTERN_HARNESS.replace("@HELPERS@", "\n".join(h.group(0) for h in helpers if h))
    out = out.replace("@TRAITS@", "\n".join([*consts, typedef.group(0)])).replace("@MMA@", mma)
    return out.replace("@THREADS@", str(threads)), threads


@pytest.mark.parametrize(
    ("path", "target"),
    [("variants/sliding_window.tl", "sm_80"), ("variants/sliding_window.tl", "sm_90"),
     ("inference/spec_decode.tl", "sm_80")],
)  # fmt: skip
def test_a_rows_column_bits_are_its_kept_columns(path: str, target: str, tmp_path: Path):
    """`tl_keep`'s bit c is set exactly where the thread's column c (its offset from the thread's first,
    per CuTe's partition of the kernel's own tiled MMA) lies in the row's interval, for every thread, row
    and interval of the block (g++ on CuTe's host code; the toolchain's include paths)."""
    import shutil
    import subprocess

    from runner.toolchain import toolchain

    if shutil.which("g++") is None:
        pytest.skip("no g++")
    harness, _ = _pattern_harness(path, target)
    src = tmp_path / "pattern.cpp"
    src.write_text(harness)
    exe = tmp_path / "pattern"
    incs = [f"-I{p}" for p in toolchain().include_paths]
    cmd = ["g++", "-std=c++17", "-O1", *incs, "-o", str(exe), str(src)]
    subprocess.run(cmd, check=True, capture_output=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[-1] == "0", out


def _diagonal_keep(diag: tuple[passes.Diagonal, ...], env: dict[str, int], q: int, kv: int, q0: int, k0: int,
                   masked: bool, span: int) -> bool:  # fmt: skip
    """A score's keep as the backward's masked score loop computes it (`sm80_bwd._emit_diagonal_limits`):
    limits relative to the thread's first score (q0, k0), clamped to ± span, and its offsets from it."""
    lo, hi = -span, span
    for d in diag:
        if any(_eval(u, env, {}) for u in d.unless):
            continue
        limit = max(min(_linear(d.offset, env, {}) - (k0 - q0), span), -span)
        if masked:
            lo, hi = (lo, min(hi, limit)) if d.upper else (max(lo, limit), hi)
    qo, ko = q - q0, kv - k0
    return qo < env["seqlen_q"] - q0 and ko < env["seqlen_k"] - k0 and lo <= ko - qo <= hi


@pytest.mark.parametrize("name", list(MASKS))
def test_diagonal_limits_keep_every_verdict(name: str):
    """Where the masks are bounds on kv_idx − q_idx alone (causal, windows, bounds on the right), the
    backward's score loop tests a score's offsets from its thread's first score against limits computed
    once a block; every (q_idx, kv_idx) of a block, for thread origins inside it, keeps the masks' verdict
    and the lengths'. The others are not rewritten."""
    masks = MASKS[name]
    diag = passes.diagonal_bounds(passes.column_bounds(masks))
    if name not in ("causal", "window header", "sliding window", "bound on the right"):
        assert diag is None
        return
    assert diag is not None
    bm, bn = 8, 16
    rng = random.Random(name)
    for _ in range(30):
        sq, sk = rng.randint(1, 40), rng.randint(1, 40)
        env = {"seqlen_q": sq, "seqlen_k": sk, "W": rng.choice([rng.randint(-3, 20), 2**31 - 1]),
               "window_left": rng.randint(-1, 8), "window_right": rng.randint(-1, 8)}  # fmt: skip
        for m in range((sq + bm - 1) // bm):
            for n in range((sk + bn - 1) // bn):
                q0, k0 = m * bm + rng.randrange(bm // 2), n * bn + rng.randrange(bn // 2)
                for q in range(q0, (m + 1) * bm):
                    for kv in range(k0, (n + 1) * bn):
                        env_qk = {**env, "q_idx": q, "kv_idx": kv}
                        want = q < sq and kv < sk and all(_eval(x, env_qk, {}) for x in masks)
                        got = _diagonal_keep(diag, env_qk, q, kv, q0, k0, True, bm + bn)
                        assert got == want, (name, env_qk, q0, k0)
                        # a block the masks keep whole: the lengths alone
                        whole = _diagonal_keep(diag, env_qk, q, kv, q0, k0, False, bm + bn)
                        assert whole == (q < sq and kv < sk)


def test_the_backward_compares_offsets_with_the_diagonal_limits():
    sys.path.insert(0, str(ROOT))
    from pipeline.backward import translate_backward

    src = translate_backward(ROOT / "examples" / "variants" / "sliding_window.tl", arch="sm_90").source
    masked = src[src.index("const int tl_kq_lo") :]
    masked = masked[: masked.index("Tensor rP")]
    assert "scalar_window_size" in masked.split("CUTE_UNROLL")[0]  # the window enters the block's limits
    loop = masked[masked.index("for (int c = 0;") :]
    assert "const bool keep = tl_qo < tl_q_end && tl_ko < tl_k_end && tl_ko - tl_qo >= tl_kq_lo" in loop
    assert "scalar_window_size" not in loop and "seqlen_k" not in loop  # nothing else per score
