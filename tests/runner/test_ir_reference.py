"""The reference derived from the kernel IR (runner.ir_reference), checked three independent ways:

- the plain, causal and window programs against the hand-written reference (runner.reference);
- every catalogue variant, built with kernel_ir.expr's constructors, against a per-element loop over an
  explicit Python formula of that variant (written here from the catalogue, not from the IR);
- every TL example under examples/variants/ (and a few TL sources below), lowered through the checker
  and the translator's plan, against a per-element scalar interpreter of the same IR nodes (`interp`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from kernel_ir.expr import BOOL, F32, I32, OPS, Const, Expr, Load, Op, Var, const, op, walk  # noqa: E402
from kernel_ir.passes import LOG2E, block_class, log2_score  # noqa: E402
from kernel_ir.program import CAUSAL_MASK, PLAIN_SCORE, WINDOW_MASKS, Forward, Scalar, SideTensor  # noqa: E402
from runner.ir_reference import (  # noqa: E402
    DOC_IDS,
    FLOAT_MAGNITUDES,
    forward_reference,
    make_side_tensors,
    side_tensor_shapes,
)
from runner.reference import attention_reference  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
B, H, HKV, SQ, SK, D, DV = 2, 4, 2, 37, 53, 16, 12

S, SCALE = Var("s", F32), Var("softmax_scale", F32)
Q, KV = Var("q_idx", I32), Var("kv_idx", I32)
HEAD, KV_HEAD, BATCH = Var("head_idx", I32), Var("kv_head_idx", I32), Var("batch_idx", I32)
SEQLEN_Q, SEQLEN_K = Var("seqlen_q", I32), Var("seqlen_k", I32)
SCALED = op("mul", S, SCALE)


def rand(*shape: int, seed: int, dtype: Any = torch.float64) -> Any:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def qkv(sq: int = SQ, sk: int = SK, h: int = H, hkv: int = HKV, d: int = D, dv: int = DV, seed: int = 0):
    return (
        rand(B, sq, h, d, seed=seed),
        rand(B, sk, hkv, d, seed=seed + 1),
        rand(B, sk, hkv, dv, seed=seed + 2),
    )


# ---- the plain forward against the hand-written reference -----------------------------------------------

PLAIN_CASES = [
    ("none", (-1, -1), 37, 53),
    ("none", (-1, -1), 53, 37),
    ("causal", (-1, -1), 37, 53),
    ("causal", (-1, -1), 53, 37),  # more queries than keys: the first 16 rows see no key
    ("window", (5, 0), 37, 53),
    ("window", (3, 2), 53, 37),  # rows past the last key + 2 see nothing
    ("window", (-1, 4), 40, 40),
    ("window", (6, -1), 17, 29),
    ("window", (0, 0), 1, 1),
]


def plain_program(mask: str) -> Forward:
    masks = {"none": (), "causal": (CAUSAL_MASK,), "window": WINDOW_MASKS}[mask]
    return Forward(score=PLAIN_SCORE, masks=masks, header_mask=mask)


@pytest.mark.parametrize(("mask", "window", "sq", "sk"), PLAIN_CASES)
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (7, 1)])
def test_plain_programs_match_the_hand_written_reference(mask, window, sq, sk, heads):
    h, hkv = heads
    q, k, v = (t.float() for t in qkv(sq, sk, h, hkv))
    o, lse = forward_reference(plain_program(mask), q, k, v, window=window, chunk=5)
    want_o, want_lse = attention_reference(q, k, v, mask=mask, window=window)
    assert o.dtype == torch.float32 and lse is not None and lse.dtype == torch.float32
    assert o.shape == (B, sq, h, DV) and lse.shape == (B, h, sq)
    torch.testing.assert_close(o, want_o, atol=2e-6, rtol=1e-5)
    assert torch.equal(torch.isposinf(lse), torch.isposinf(want_lse))
    torch.testing.assert_close(lse, want_lse, atol=2e-6, rtol=1e-5)
    empty = o.transpose(1, 2)[torch.isposinf(want_lse)]
    assert torch.equal(empty, torch.zeros_like(empty))


def test_plain_program_with_a_softmax_scale_float64_and_strided_bf16_inputs():
    def strided(t):
        base = torch.zeros(t.shape[0], t.shape[1] + 3, 2 * t.shape[2], t.shape[3], dtype=torch.bfloat16)
        view = base[:, 1 : t.shape[1] + 1, ::2]
        view.copy_(t)
        return view

    q, k, v = (strided(t) for t in qkv(29, 41))
    assert not q.is_contiguous()
    o, lse = forward_reference(plain_program("causal"), q, k, v, softmax_scale=0.3, dtype=torch.float64)
    want_o, want_lse = attention_reference(q, k, v, mask="causal", softmax_scale=0.3)
    assert o.dtype == torch.float64 and lse.dtype == torch.float64
    torch.testing.assert_close(o.float(), want_o, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(lse.float(), want_lse, atol=2e-6, rtol=1e-5)


def test_chunking_does_not_change_the_result():
    q, k, v = qkv()
    prog, tensors, _ = CATALOGUE["combination"].build()
    ref = [
        forward_reference(prog, q, k, v, tensors=tensors, chunk=c, dtype=torch.float64) for c in (1, 7, 1024)
    ]
    for o, lse in ref[1:]:
        torch.testing.assert_close(o, ref[0][0], atol=1e-12, rtol=0)
        torch.testing.assert_close(lse, ref[0][1], atol=1e-12, rtol=0)


def test_shared_and_repeated_subexpressions_are_evaluated_once(monkeypatch):
    """A DAG 40 levels deep with every level used twice (2^40 paths), and a program whose copies of one
    subexpression are distinct objects: one Q·Kᵀ and one P·V per chunk either way."""
    x = SCALED
    for _ in range(40):
        x = op("add", op("mul", x, const(0.5)), op("mul", op("tanh", x), const(0.5)))
    deep = Forward(x, masks=(op("gt", x, const(-0.3)),))
    q, k, v = qkv()
    calls = []
    matmul = torch.matmul
    monkeypatch.setattr(torch, "matmul", lambda *a: calls.append(1) or matmul(*a))
    o, _ = forward_reference(deep, q, k, v, chunk=16, dtype=torch.float64)
    assert len(calls) == 2 * 3  # three chunks of rows
    where = Forward(op("where", op("gt", SCALED, const(0.0)), SCALED, op("mul", SCALED, const(0.1))))
    copy = op("mul", Var("s", F32), Var("softmax_scale", F32))  # equal to SCALED, built apart
    tree = Forward(op("where", op("gt", SCALED, const(0.0)), copy, op("mul", SCALED, const(0.1))))
    assert tree.score.args[1] is not tree.score.args[0].args[0]
    assert Forward.from_dict(where.to_dict()) == where  # the launch spec's JSON keeps the DAG
    calls.clear()
    forward_reference(tree, q, k, v, chunk=16, dtype=torch.float64)
    assert len(calls) == 2 * 3
    assert torch.isfinite(o).all()


# ---- the catalogue against explicit per-element formulas -----------------------------------------------


@dataclass
class Variant:
    """A program built with the IR's constructors and its meaning as a Python formula per score.
    `score(s, b, h, i, j, t)` gets the raw score, the indices and the side tensors as nested lists;
    `keep` likewise; `sink(b, h, t)`; `out(b, h, i, t)` the output scale without a softmax."""

    program: Forward
    tensors: Callable[[], dict[str, Any]]
    score: Callable[..., float]
    keep: Callable[..., bool] = lambda s, b, h, i, j, t: True
    sink: Callable[..., float] | None = None
    out: Callable[..., float] | None = None
    scalars: dict[str, float | int] = field(default_factory=dict)  # overrides passed to the reference
    scale: float = 0.3

    def build(self) -> tuple[Forward, dict[str, Any], dict[str, float | int]]:
        return self.program, self.tensors(), self.scalars


def _ids(seed: int) -> Any:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 5, (B, SK), generator=g).sort(dim=-1).values.to(torch.int32)


def _flags(seed: int) -> Any:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(B, SK, generator=g) < 0.12).to(torch.int32)


ALIBI = torch.tensor([2.0 ** (-8 * (h + 1) / H) for h in range(H)])
TABLE = rand(H, 16, seed=11)
TAB16 = rand(16, seed=12)
SINKS = rand(H, seed=13) * 3
PREFIX = torch.tensor([5, 30], dtype=torch.int32)

CAP = Var("cap", F32)
W, DIL, NSINK, PRE = Var("w", I32), Var("dil", I32), Var("n_sink", I32), Var("prefix_len", I32)
SOFTCAP = op("mul", CAP, op("tanh", op("div", SCALED, CAP)))
DOC_CAUSAL = op("and", op("eq", Load("doc", (BATCH, Q), I32), Load("doc", (BATCH, KV), I32)), op("le", KV, Q))
PREFIX_LM = op("or", op("lt", KV, Load("prefix", (BATCH,), I32)), op("le", KV, Q))
DOC_T, PREFIX_T = SideTensor("doc", ("batch", "seqlen_k"), "int32"), SideTensor("prefix", ("batch",), "int32")
DIST = op("abs", op("sub", Q, KV))


def _softcap(s, cap):
    return cap * math.tanh(s * 0.3 / cap)


def _causal_br(i, j):  # bottom-right aligned, as CAUSAL_MASK
    return j <= i + SK - SQ


CATALOGUE: dict[str, Variant] = {
    "softcap": Variant(
        Forward(SOFTCAP, scalars=(Scalar("cap", F32, 30.0),)),
        dict,
        lambda s, b, h, i, j, t: _softcap(s, 30.0),
    ),
    "softcap, cap at launch": Variant(
        Forward(SOFTCAP, scalars=(Scalar("cap", F32, 30.0),)),
        dict,
        lambda s, b, h, i, j, t: _softcap(s, 0.7),
        scalars={"cap": 0.7},
    ),
    "alibi + causal": Variant(
        Forward(
            op("add", SCALED, op("mul", Load("slopes", (HEAD,), F32), op("sub", KV, Q))),
            masks=(CAUSAL_MASK,),
            tensors=(SideTensor("slopes", ("heads",), "float32"),),
        ),
        lambda: {"slopes": ALIBI},
        lambda s, b, h, i, j, t: s * 0.3 + t["slopes"][h] * (j - i),
        lambda s, b, h, i, j, t: _causal_br(i, j),
    ),
    "relative bias table": Variant(
        Forward(
            op("add", SCALED, Load("table", (HEAD, op("min", DIST, const(15))), F32)),
            tensors=(SideTensor("table", ("heads", 16), "float32"),),
        ),
        lambda: {"table": TABLE},
        lambda s, b, h, i, j, t: s * 0.3 + t["table"][h][min(abs(i - j), 15)],
    ),
    "sliding window": Variant(
        Forward(
            SCALED, masks=(op("le", op("sub", Q, W), KV), op("le", KV, Q)), scalars=(Scalar("w", I32, 8),)
        ),
        dict,
        lambda s, b, h, i, j, t: s * 0.3,
        lambda s, b, h, i, j, t: i - 8 <= j <= i,
    ),
    "dilated sliding window": Variant(
        Forward(
            SCALED,
            masks=(op("and", op("le", DIST, W), op("eq", op("mod", DIST, DIL), const(0))),),
            scalars=(Scalar("w", I32, 12), Scalar("dil", I32, 3)),
        ),
        dict,
        lambda s, b, h, i, j, t: s * 0.3,
        lambda s, b, h, i, j, t: abs(i - j) <= 12 and abs(i - j) % 3 == 0,
    ),
    "global + sliding": Variant(
        Forward(
            SCALED,
            masks=(
                op(
                    "or",
                    op("or", op("le", DIST, W), op("ne", Load("glob", (BATCH, Q), I32), const(0))),
                    op("ne", Load("glob", (BATCH, KV), I32), const(0)),
                ),
            ),
            scalars=(Scalar("w", I32, 3),),
            tensors=(SideTensor("glob", ("batch", "seqlen_k"), "int32"),),
        ),
        lambda: {"glob": _flags(21)},
        lambda s, b, h, i, j, t: s * 0.3,
        lambda s, b, h, i, j, t: abs(i - j) <= 3 or t["glob"][b][i] != 0 or t["glob"][b][j] != 0,
    ),
    "prefix lm per batch": Variant(
        Forward(SCALED, masks=(PREFIX_LM,), tensors=(PREFIX_T,)),
        lambda: {"prefix": PREFIX},
        lambda s, b, h, i, j, t: s * 0.3,
        lambda s, b, h, i, j, t: j < t["prefix"][b] or j <= i,
    ),
    "document mask": Variant(
        Forward(SCALED, masks=(DOC_CAUSAL,), tensors=(DOC_T,)),
        lambda: {"doc": _ids(22)},
        lambda s, b, h, i, j, t: s * 0.3,
        lambda s, b, h, i, j, t: t["doc"][b][i] == t["doc"][b][j] and j <= i,
    ),
    "sink tokens + window": Variant(
        Forward(
            SCALED,
            masks=(op("or", op("lt", KV, NSINK), op("and", op("le", op("sub", Q, W), KV), op("le", KV, Q))),),
            scalars=(Scalar("n_sink", I32, 4), Scalar("w", I32, 6)),
        ),
        dict,
        lambda s, b, h, i, j, t: s * 0.3,
        lambda s, b, h, i, j, t: j < 4 or i - 6 <= j <= i,
    ),
    "learnable sink": Variant(
        Forward(
            SCALED, sink=Load("sinks", (HEAD,), F32), tensors=(SideTensor("sinks", ("heads",), "float32"),)
        ),
        lambda: {"sinks": SINKS},
        lambda s, b, h, i, j, t: s * 0.3,
        sink=lambda b, h, t: t["sinks"][h],
    ),
    "learnable sink, rows without keys": Variant(  # rows 0..9 keep nothing: O = 0, LSE = the sink
        Forward(
            SCALED,
            masks=(op("le", KV, op("sub", Q, const(10))),),
            sink=Load("sinks", (HEAD,), F32),
            tensors=(SideTensor("sinks", ("heads",), "float32"),),
        ),
        lambda: {"sinks": SINKS},
        lambda s, b, h, i, j, t: s * 0.3,
        lambda s, b, h, i, j, t: j <= i - 10,
        sink=lambda b, h, t: t["sinks"][h],
    ),
    "rows without keys": Variant(  # no sink: O = 0, LSE = +inf
        Forward(SCALED, masks=(op("le", KV, op("sub", Q, const(10))),)),
        dict,
        lambda s, b, h, i, j, t: s * 0.3,
        lambda s, b, h, i, j, t: j <= i - 10,
    ),
    "sigmoid attention": Variant(
        Forward(
            op("sigmoid", op("add", SCALED, Var("bias", F32))),
            masks=(CAUSAL_MASK,),
            normalizer="none",
            scalars=(Scalar("bias", F32, -1.5),),
        ),
        dict,
        lambda s, b, h, i, j, t: 1 / (1 + math.exp(-(s * 0.3 - 1.5))),
        lambda s, b, h, i, j, t: _causal_br(i, j),
    ),
    "relu attention": Variant(
        Forward(op("relu", SCALED), normalizer="none", output_scale=op("div", const(1.0), SEQLEN_K)),
        dict,
        lambda s, b, h, i, j, t: max(s * 0.3, 0.0),
        out=lambda b, h, i, t: 1 / SK,
    ),
    "combination: prefix lm + softcap + document": Variant(
        Forward(
            SOFTCAP,
            masks=(op("or", op("lt", KV, Load("prefix", (BATCH,), I32)), DOC_CAUSAL),),
            scalars=(Scalar("cap", F32, 30.0),),
            tensors=(DOC_T, PREFIX_T),
        ),
        lambda: {"doc": _ids(23), "prefix": PREFIX},
        lambda s, b, h, i, j, t: _softcap(s, 30.0),
        lambda s, b, h, i, j, t: j < t["prefix"][b] or (t["doc"][b][i] == t["doc"][b][j] and j <= i),
    ),
    "c modulo, kv head, batch, per-row output scale": Variant(
        Forward(
            op(
                "add",
                op("add", SCALED, op("mul", op("float", op("mod", op("sub", Q, KV), const(5))), const(0.25))),
                op("float", op("add", op("mul", KV_HEAD, const(2)), BATCH)),
            ),
            normalizer="none",
            output_scale=op("div", const(1.0), op("add", Q, const(1))),
        ),
        dict,
        lambda s, b, h, i, j, t: s * 0.3 + math.fmod(i - j, 5) * 0.25 + (h // 2) * 2 + b,
        out=lambda b, h, i, t: 1 / (i + 1),
    ),
    "guarded read (where is lazy)": Variant(
        Forward(
            op("add", SCALED, op("where", op("lt", KV, const(16)), Load("tab", (KV,), F32), const(0.0))),
            masks=(op("or", op("ge", KV, const(16)), op("gt", Load("tab", (KV,), F32), const(-0.5))),),
            tensors=(SideTensor("tab", (16,), "float32"),),
        ),
        lambda: {"tab": TAB16},
        lambda s, b, h, i, j, t: s * 0.3 + (t["tab"][j] if j < 16 else 0.0),
        lambda s, b, h, i, j, t: j >= 16 or t["tab"][j] > -0.5,
    ),
}


CATALOGUE["combination"] = CATALOGUE["combination: prefix lm + softcap + document"]


def brute_force(variant: Variant, q, k, v, tensors: dict[str, Any]):
    """O and LSE, one score at a time, from the variant's formula."""
    t = {name: x.tolist() for name, x in tensors.items()}
    b_, sq, h_, _ = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    group = h_ // hkv
    softmax = variant.program.normalizer == "softmax"
    out = torch.zeros(b_, sq, h_, v.shape[3], dtype=torch.float64)
    lse = torch.full((b_, h_, sq), math.inf, dtype=torch.float64)
    for b in range(b_):
        for h in range(h_):
            kk, vv = k[b, :, h // group].double(), v[b, :, h // group].double()
            for i in range(sq):
                raw = (kk @ q[b, i, h].double()).tolist()
                xs = [variant.score(raw[j], b, h, i, j, t) for j in range(sk)]
                kept = [variant.keep(raw[j], b, h, i, j, t) for j in range(sk)]
                if not softmax:
                    p = [x if kp else 0.0 for x, kp in zip(xs, kept, strict=True)]
                    factor = variant.out(b, h, i, t) if variant.out else 1.0
                    out[b, i, h] = (torch.tensor(p, dtype=torch.float64) @ vv) * factor
                    continue
                logits = [x for x, kp in zip(xs, kept, strict=True) if kp]
                if variant.sink is not None:
                    logits.append(variant.sink(b, h, t))
                if not logits:
                    continue  # O = 0, LSE = +inf
                m = max(logits)
                row_lse = m + math.log(sum(math.exp(x - m) for x in logits))
                p = [math.exp(x - row_lse) if kp else 0.0 for x, kp in zip(xs, kept, strict=True)]
                out[b, i, h] = torch.tensor(p, dtype=torch.float64) @ vv
                lse[b, h, i] = row_lse
    return out, (lse if softmax else None)


@pytest.mark.parametrize("name", [n for n in CATALOGUE if n != "combination"])
def test_catalogue_variant_matches_its_formula(name):
    variant = CATALOGUE[name]
    prog, tensors, scalars = variant.build()
    q, k, v = qkv()
    o, lse = forward_reference(
        prog,
        q,
        k,
        v,
        softmax_scale=variant.scale,
        scalars=scalars,
        tensors=tensors,
        chunk=8,
        dtype=torch.float64,
    )
    want_o, want_lse = brute_force(variant, q, k, v, tensors)
    assert o.dtype == torch.float64
    torch.testing.assert_close(o, want_o, atol=1e-10, rtol=1e-10)
    if want_lse is None:
        assert lse is None
    else:
        assert torch.equal(torch.isposinf(lse), torch.isposinf(want_lse))
        torch.testing.assert_close(lse, want_lse, atol=1e-10, rtol=1e-10)
    # and in float32, within float32 rounding
    o32, _ = forward_reference(prog, q.float(), k.float(), v.float(), softmax_scale=variant.scale,
                                   scalars=scalars, tensors=tensors)  # fmt: skip
    assert o32.dtype == torch.float32
    torch.testing.assert_close(o32.double(), want_o, atol=1e-4, rtol=1e-4)


def test_rows_without_keys_follow_the_abi():
    prog, tensors, _ = CATALOGUE["learnable sink, rows without keys"].build()
    q, k, v = qkv()
    o, lse = forward_reference(prog, q, k, v, tensors=tensors)
    assert torch.equal(o[:, :10], torch.zeros_like(o[:, :10]))
    assert torch.equal(lse[:, :, :10], SINKS.view(1, H, 1).expand(B, H, 10).float())
    prog, _, _ = CATALOGUE["rows without keys"].build()
    o, lse = forward_reference(prog, q, k, v)
    assert torch.equal(o[:, :10], torch.zeros_like(o[:, :10])) and torch.isposinf(lse[:, :, :10]).all()
    assert torch.isfinite(lse[:, :, 10:]).all()


def test_a_sink_lowers_every_weight():
    """The sink takes its share of each row: the weights sum to 1 − exp(sink − LSE)."""
    prog, tensors, _ = CATALOGUE["learnable sink"].build()
    q, k, _ = qkv()
    ones = torch.ones(B, SK, HKV, 1, dtype=torch.float64)
    o, lse = forward_reference(prog, q, k, ones, tensors=tensors, dtype=torch.float64)
    share = torch.exp(SINKS.view(1, H, 1) - lse).transpose(1, 2)
    torch.testing.assert_close(o[..., 0], 1 - share, atol=1e-12, rtol=0)


# ---- error cases -------------------------------------------------------------------------------------


def test_a_missing_side_tensor_is_named():
    prog, _, _ = CATALOGUE["alibi + causal"].build()
    with pytest.raises(ValueError, match=r"`slopes` \(heads\) is missing"):
        forward_reference(prog, *qkv())


def test_a_misshapen_side_tensor_is_named():
    prog, _, _ = CATALOGUE["alibi + causal"].build()
    with pytest.raises(ValueError, match=r"`slopes` \(heads\) must have shape \(4,\), got \(2,\)"):
        forward_reference(prog, *qkv(), tensors={"slopes": torch.ones(2)})


def test_a_side_tensor_of_the_wrong_kind_is_named():
    prog, _, _ = CATALOGUE["document mask"].build()
    with pytest.raises(ValueError, match="`doc` is int32"):
        forward_reference(prog, *qkv(), tensors={"doc": torch.zeros(B, SK)})
    prog, _, _ = CATALOGUE["alibi + causal"].build()
    with pytest.raises(ValueError, match="`slopes` is float32"):
        forward_reference(prog, *qkv(), tensors={"slopes": torch.zeros(H, dtype=torch.int32)})


def test_an_undeclared_tensor_or_scalar_is_refused():
    prog, tensors, _ = CATALOGUE["alibi + causal"].build()
    with pytest.raises(ValueError, match="no side tensor `slope`"):
        forward_reference(prog, *qkv(), tensors={**tensors, "slope": torch.ones(H)})
    with pytest.raises(ValueError, match="no runtime scalar `cap`"):
        forward_reference(prog, *qkv(), tensors=tensors, scalars={"cap": 1.0})
    prog, _, _ = CATALOGUE["sliding window"].build()
    with pytest.raises(ValueError, match="`w` is an integer"):
        forward_reference(prog, *qkv(), scalars={"w": 2.5})
    with pytest.raises(ValueError, match="`undeclared` is neither"):
        forward_reference(Forward(op("mul", S, Var("undeclared", F32))), *qkv())
    bad = Forward(SCALED, sink=Load("s2", (HEAD,), F32))
    with pytest.raises(ValueError, match="reads side tensor `s2` but does not declare it"):
        forward_reference(bad, *qkv())


def test_an_out_of_range_read_names_the_tensor_and_the_index():
    prog, _, _ = CATALOGUE["document mask"].build()
    q, k, v = qkv(sq=60, sk=53)  # doc is (batch, seqlen_k) but read at q_idx up to 59
    want = (
        r"`doc` \(batch, seqlen_k\) = \(2, 53\) is read out of range at index \(0, 53\) by "
        r"`doc\[batch_idx, q_idx\]` in the mask at batch_idx=0, q_idx=53"
    )
    with pytest.raises(ValueError, match=want):
        forward_reference(prog, q, k, v, tensors={"doc": _ids(1)[:, :53]}, chunk=16)
    unclamped = Forward(
        op("add", SCALED, Load("table", (HEAD, DIST), F32)),
        tensors=(SideTensor("table", ("heads", 16), "float32"),),
    )
    with pytest.raises(ValueError, match=r"`table` .* index \(0, 16\) .* in the score at"):
        forward_reference(unclamped, *qkv(), tensors={"table": TABLE})
    negative = Forward(SCALED, sink=Load("sinks", (op("sub", HEAD, const(1)),), F32),
                       tensors=(SideTensor("sinks", ("heads",), "float32"),))  # fmt: skip
    with pytest.raises(ValueError, match=r"`sinks` .* index \(-1,\) .* in the sink at head_idx=0"):
        forward_reference(negative, *qkv(), tensors={"sinks": SINKS})
    with pytest.raises(ValueError, match=r"with 2 indices, it has 1 dims"):
        forward_reference(Forward(op("add", SCALED, Load("sinks", (HEAD, Q), F32)),
                                  tensors=(SideTensor("sinks", ("heads",), "float32"),)),
                          *qkv(), tensors={"sinks": SINKS})  # fmt: skip


def test_and_or_are_lazy_like_c():
    """`kv_idx < 16 & tab[kv_idx] != 0`: the read past 16 is never made, as with C's &&."""
    tab = SideTensor("flags", (16,), "int32")
    flags = torch.tensor([1, 0] * 8, dtype=torch.int32)
    guarded = op("and", op("lt", KV, const(16)), op("ne", Load("flags", (KV,), I32), const(0)))
    o, _ = forward_reference(
        Forward(SCALED, masks=(guarded,), tensors=(tab,)), *qkv(), tensors={"flags": flags}
    )
    assert torch.isfinite(o).all()
    unguarded = op("and", op("ne", Load("flags", (KV,), I32), const(0)), op("lt", KV, const(16)))
    with pytest.raises(ValueError, match=r"`flags` \(16\) = \(16,\) is read out of range at index \(16,\)"):
        forward_reference(
            Forward(SCALED, masks=(unguarded,), tensors=(tab,)), *qkv(), tensors={"flags": flags}
        )


def test_integer_modulo_by_zero_is_an_error_unless_guarded():
    prog, _, _ = CATALOGUE["dilated sliding window"].build()
    with pytest.raises(ValueError, match="divides by zero"):
        forward_reference(prog, *qkv(), scalars={"dil": 0})
    guarded = op("or", op("eq", DIL, const(0)), op("eq", op("mod", KV, DIL), const(0)))
    forward_reference(Forward(SCALED, masks=(guarded,), scalars=(Scalar("dil", I32, 0),)), *qkv())


def test_bad_inputs():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="multiple of heads_kv"):
        forward_reference(plain_program("none"), q[:, :, :3], k, v)
    with pytest.raises(ValueError, match="float32 or float64"):
        forward_reference(plain_program("none"), q, k, v, dtype=torch.float16)
    with pytest.raises(ValueError, match="must not depend on kv_idx"):
        forward_reference(Forward(SCALED, sink=op("float", KV)), q, k, v)


def test_empty_lengths():
    q, k, v = qkv(sq=0, sk=5)
    o, lse = forward_reference(plain_program("causal"), q, k, v)
    assert o.shape == (B, 0, H, DV) and lse.shape == (B, H, 0)
    q, k, v = qkv(sq=3, sk=0)
    prog, tensors, _ = CATALOGUE["learnable sink"].build()
    o, lse = forward_reference(prog, q, k, v, tensors=tensors)
    assert torch.equal(o, torch.zeros_like(o)) and torch.equal(
        lse, SINKS.float().view(1, H, 1).expand(B, H, 3)
    )


# ---- side tensors for verification ----------------------------------------------------------------------


def test_side_tensor_shapes_and_random_values():
    prog = Forward(
        SCALED,
        tensors=(
            SideTensor("slopes", ("heads",), "float32"),
            SideTensor("table", ("heads", 32), "float32"),
            SideTensor("doc", ("batch", "seqlen_q"), "int32"),
            SideTensor("kv_doc", ("seqlen_k",), "int32"),
            SideTensor("prefix", ("batch",), "int32"),
            SideTensor("buckets", ("seqlen_q", "seqlen_k"), "int32"),
        ),
    )
    shapes = side_tensor_shapes(prog, 3, 8, 2, 100, 120)
    assert shapes == {"slopes": (8,), "table": (8, 32), "doc": (3, 100), "kv_doc": (120,), "prefix": (3,),
                      "buckets": (100, 120)}  # fmt: skip
    gen = torch.Generator().manual_seed(5)
    t = make_side_tensors(prog, 3, 8, 2, 100, 120, generator=gen, tensors={"slopes": ALIBI[:1].repeat(8)})
    assert {n: tuple(x.shape) for n, x in t.items()} == shapes
    assert torch.equal(t["slopes"], ALIBI[:1].repeat(8))
    assert t["table"].dtype == torch.float32 and t["doc"].dtype == torch.int32
    mag = t["table"].abs()
    assert (mag >= FLOAT_MAGNITUDES[0] * 0.999).all() and (mag <= FLOAT_MAGNITUDES[1] * 1.001).all()
    assert (t["table"] < 0).any() and (t["table"] > 0).any()
    for ids in (t["doc"], t["kv_doc"]):
        assert (ids.diff(dim=-1) >= 0).all() and ids.min() >= 0 and ids.max() < DOC_IDS
        assert ids.unique().numel() > 2  # several documents
        zeros = (ids == 0).sum(dim=-1)  # document 0 (unflagged) over a quarter to three quarters
        assert ((zeros >= ids.shape[-1] // 4) & (zeros <= 3 * ids.shape[-1] // 4)).all()
    assert ((t["prefix"] >= 0) & (t["prefix"] <= 120)).all()
    assert set(t["buckets"].unique().tolist()) == {0, 1}
    again = make_side_tensors(prog, 3, 8, 2, 100, 120, generator=torch.Generator().manual_seed(5))
    assert torch.equal(again["doc"], t["doc"]) and torch.equal(again["table"], t["table"])
    with pytest.raises(ValueError, match="no side tensor `nope`"):
        make_side_tensors(prog, 3, 8, 2, 100, 120, tensors={"nope": torch.ones(1)})


# ---- a scalar interpreter of the IR: the TL examples and every operation ---------------------------------


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _div(a: float, b: float) -> float:
    if b == 0:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1, b)
    return a / b


def _log(x: float) -> float:
    return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)


def _sigmoid(x: float) -> float:
    return 1 / (1 + _exp(-x)) if x >= 0 else _exp(x) / (1 + _exp(x))


def _exp2(x: float) -> float:
    try:
        return 2.0**x
    except OverflowError:
        return math.inf


_SCALAR = {
    "tanh": math.tanh, "sigmoid": _sigmoid, "exp": _exp, "exp2": _exp2, "log": _log, "abs": abs,
    "relu": lambda x: max(x, 0), "neg": lambda x: -x, "float": float, "not": lambda x: not x,
    "rcp": lambda x: _div(1.0, x),
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": _div,
    "min": min, "max": max, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
}  # fmt: skip


def interp(e: Expr, env: dict[str, Any], tensors: dict[str, Any], memo: dict[int, Any]) -> Any:
    """One value of `e` (Python numbers, C semantics for `%`, lazy where / and / or); `memo` by node
    identity (the nodes' structural hash is not cached)."""
    if id(e) in memo:
        return memo[id(e)]
    if isinstance(e, Const):
        r = float(e.value) if e.type == F32 else (bool(e.value) if e.type == BOOL else int(e.value))
    elif isinstance(e, Var):
        r = env[e.name]
    elif isinstance(e, Load):
        x = tensors[e.tensor]
        for i in e.index:
            n = interp(i, env, tensors, memo)
            if not 0 <= n < len(x):
                raise IndexError(f"{e.tensor}: {n}")
            x = x[n]
        r = x
    else:
        assert isinstance(e, Op)
        ev = [lambda a=a: interp(a, env, tensors, memo) for a in e.args]
        if e.op == "where":
            r = ev[1]() if ev[0]() else ev[2]()
        elif e.op == "and":
            r = bool(ev[0]()) and bool(ev[1]())
        elif e.op == "or":
            r = bool(ev[0]()) or bool(ev[1]())
        elif e.op == "mod":
            a, b = ev[0](), ev[1]()
            if e.type == I32:
                if b == 0:
                    raise ZeroDivisionError
                r = int(math.fmod(a, b))
            else:
                r = math.fmod(a, b) if b != 0 else math.nan
        else:
            r = _SCALAR[e.op](*(f() for f in ev))
        if e.type == F32:
            r = float(r)
        elif e.type == I32:
            r = int(r)
    memo[id(e)] = r
    return r


def interpret(prog: Forward, q, k, v, *, scale: float, window=(-1, -1), scalars=None, tensors=None):
    """O and LSE by interpreting the program one score at a time."""
    b_, sq, h_, _ = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    group = h_ // hkv
    t = {name: x.tolist() for name, x in (tensors or {}).items()}
    consts = {s.name: (scalars or {}).get(s.name, s.default) for s in prog.scalars}
    consts.update(seqlen_q=sq, seqlen_k=sk, heads=h_, heads_kv=hkv, batch=b_, softmax_scale=scale,
                  window_left=window[0], window_right=window[1])  # fmt: skip
    softmax = prog.normalizer == "softmax"
    out = torch.zeros(b_, sq, h_, v.shape[3], dtype=torch.float64)
    lse = torch.full((b_, h_, sq), math.inf, dtype=torch.float64)
    for b in range(b_):
        for h in range(h_):
            kk, vv = k[b, :, h // group].double(), v[b, :, h // group].double()
            for i in range(sq):
                raw = (kk @ q[b, i, h].double()).tolist()
                row = dict(consts, batch_idx=b, head_idx=h, kv_head_idx=h // group, q_idx=i)
                xs, kept = [], []
                for j in range(sk):
                    env = dict(row, kv_idx=j, s=raw[j])
                    memo: dict[int, Any] = {}
                    xs.append(interp(prog.score, env, t, memo))
                    kept.append(all(interp(m, env, t, memo) for m in prog.masks))
                if not softmax:
                    p = [x if kp else 0.0 for x, kp in zip(xs, kept, strict=True)]
                    factor = interp(prog.output_scale, row, t, {}) if prog.output_scale is not None else 1.0
                    out[b, i, h] = (torch.tensor(p, dtype=torch.float64) @ vv) * factor
                    continue
                logits = [x for x, kp in zip(xs, kept, strict=True) if kp]
                if prog.sink is not None:
                    logits.append(interp(prog.sink, row, t, {}))
                m = max(logits, default=-math.inf)
                if m == -math.inf:
                    continue
                row_lse = m + math.log(sum(math.exp(x - m) for x in logits))
                p = [math.exp(x - row_lse) if kp else 0.0 for x, kp in zip(xs, kept, strict=True)]
                out[b, i, h] = torch.tensor(p, dtype=torch.float64) @ vv
                lse[b, h, i] = row_lse
    return out, (lse if softmax else None)


def test_every_operation_matches_the_scalar_interpreter():
    a = SCALED
    fl = op("float", op("mod", op("sub", Q, KV), const(7)))  # negative dividends: C's %
    parts = [
        op("tanh", a),
        op("sigmoid", a),
        op("exp", op("min", a, const(2.0))),
        op("exp2", op("max", op("neg", a), const(-3.0))),
        op("log", op("add", op("abs", a), const(1.0))),
        op("relu", op("sub", a, const(0.2))),
        op("div", fl, op("add", op("float", HEAD), const(1.5))),
        op("mod", a, const(0.7)),
        op("rcp", op("add", op("abs", a), const(0.5))),
        op("float", op("max", op("min", op("neg", KV), const(-3)), op("abs", op("sub", Q, const(20))))),
    ]
    total = parts[0]
    for p in parts[1:]:
        total = op("add", total, p)
    cond = op(
        "or",
        op("and", op("le", KV, op("add", Q, const(20))), op("not", op("eq", BATCH, const(1)))),
        op("gt", HEAD, const(2)),
    )
    score = op("where", cond, total, op("mul", a, const(0.5)))
    mask = op("or", op("ge", KV, const(2)), op("ne", op("mod", KV, const(3)), const(0)))
    mask2 = op("not", op("lt", op("relu", op("sub", Q, KV)), const(-1)))
    prog = Forward(score, masks=(mask, mask2))
    used = {n.op for r in (score, mask, mask2) for n in walk(r) if isinstance(n, Op)}
    assert used == set(OPS)
    q, k, v = qkv(sq=9, sk=11)
    o, lse = forward_reference(prog, q, k, v, softmax_scale=0.4, dtype=torch.float64, chunk=4)
    want_o, want_lse = interpret(prog, q, k, v, scale=0.4)
    torch.testing.assert_close(o, want_o, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(lse, want_lse, atol=1e-10, rtol=1e-10)
    none = Forward(score, masks=(mask,), normalizer="none", output_scale=op("float", op("add", Q, SEQLEN_Q)))
    o, lse = forward_reference(none, q, k, v, softmax_scale=0.4, dtype=torch.float64, chunk=4)
    want_o, _ = interpret(none, q, k, v, scale=0.4)
    assert lse is None
    torch.testing.assert_close(o, want_o, atol=1e-10, rtol=1e-10)


# TL sources lowered through the checker and the translator; examples/variants/*.tl join them when present.
TL_HEAD = """Kernel {name}
Target sm_80
Dtype bf16
Param BM = 128
Param BN = 64
Param d = 64
{decls}
Allocate Q in global (seqlen_q, d) with offset q_offset
Allocate K in global (seqlen_k, d) with offset kv_offset
Allocate V in global (seqlen_k, d) with offset kv_offset
Allocate O in global (seqlen_q, d) with offset o_offset
{tensors}
Copy Q (BM, d) in coordinate [L = block_m] from global to shared
Copy Q from shared to register
Allocate S in register (BM, BN)
Allocate acc_o in register (BM, d)
for j = 0: seqlen_k / BN
    Copy K (BN, d) in coordinate [L = j] from global to shared
    Copy K from shared to register
    Compute GEMM Q, K and get S
{region}
    Reshape S from (MMA_C, MMA_M, MMA_N) to (MMA_A, MMA_M, MMA_N_new)
    Copy V (BN, d) in coordinate [L = j] from global to shared
    Copy V from shared to register
    Compute GEMM S, V and accumulate acc_o
end
{after}
Copy acc_o (BM, d) in coordinate [L = block_m] from register to global as O
"""

INLINE_TL = {
    "inline_softcap_alibi_prefix_doc_sink": dict(
        decls="Scalar cap = 30.0\nScalar prefix = 4\nMask none",
        tensors="Allocate doc in global (batch, seqlen_k) with dtype int32\n"
        "Allocate slopes in global (heads)\nAllocate sinks in global (heads)",
        region="    Compute Multiply S, scale and get new S\n"
        "    Compute Multiply cap, tanh(S / cap) and get new S\n"
        "    Compute Add S, slopes[head_idx] * (kv_idx - q_idx) and get new S\n"
        "    Compute Mask S, kv_idx < prefix | (doc[batch_idx, kv_idx] == doc[batch_idx, q_idx]"
        " & kv_idx <= q_idx)\n"
        "    Compute Softmax S, sinks[head_idx]",
        after="Compute Divide acc_o, rowsum and get new acc_o",
    ),
    "inline_window_header_relu": dict(
        decls="Mask window(3, 1)",
        tensors="",
        region="    Compute Multiply S, scale and get new S\n    Compute Relu S and get new S\n"
        "    Compute Mask S",
        after="Compute Multiply acc_o, 1.0 / seqlen_k and get new acc_o",
    ),
    "inline_sigmoid_dilated": dict(
        decls="Scalar dil = 2\nMask causal",
        tensors="",
        region="    Compute Multiply S, scale and get new S\n    Compute Sigmoid S and get new S\n"
        "    Compute Mask S, (q_idx - kv_idx) % dil == 0",
        after="",
    ),
}


def _tl_sources() -> list[Any]:
    cases = [
        pytest.param(name, TL_HEAD.format(name=name, **parts), id=name) for name, parts in INLINE_TL.items()
    ]
    paths = sorted((ROOT / "examples" / "variants").glob("*.tl"))
    cases += [pytest.param(str(p), None, id=p.stem) for p in paths]
    if not paths:
        skip = pytest.mark.skip(reason="no examples/variants/*.tl yet")
        cases.append(pytest.param("examples/variants", None, id="examples-variants", marks=skip))
    return cases


def _lower(source: str) -> Any:
    analysis = pytest.importorskip("tl_language.analysis")
    plan_mod = pytest.importorskip("translator.plan")
    res = analysis.analyze(source)
    errors = [d for d in res.diagnostics if d.severity.name == "ERROR"]
    assert not errors, errors
    return plan_mod.make_plan(res.model, source)


@pytest.mark.parametrize(("name", "source"), _tl_sources())
def test_tl_program_matches_the_scalar_interpreter(name, source):
    plan = _lower(source if source is not None else Path(name).read_text())
    prog = plan.ir
    hkv = plan.heads_kv or 2
    h = hkv * (plan.group or 2)
    window = plan.window if plan.window != (-1, -1) else (4, 1)
    window = tuple(min(w, 3) for w in window)  # windows, prefixes and sink counts that bite at 10 keys
    scalars = {s.name: min(s.default, 3) for s in prog.scalars if s.type == I32 and s.default > 3}
    kw = dict(softmax_scale=0.25, window=window, scalars=scalars)
    for sq, sk in ((9, 9), (6, 10), (10, 6)):
        q, k, v = qkv(sq, sk, h, hkv, plan.head_dim_qk, plan.head_dim_v, seed=sq + sk)
        tensors = make_side_tensors(prog, B, h, hkv, sq, sk, generator=torch.Generator().manual_seed(sq))
        try:
            want = interpret(prog, q, k, v, scale=0.25, window=window, scalars=scalars, tensors=tensors)
        except IndexError:  # a side tensor over one length read at the other's index: both must refuse
            with pytest.raises(ValueError, match="out of range"):
                forward_reference(prog, q, k, v, tensors=tensors, **kw)
            continue
        o, lse = forward_reference(prog, q, k, v, tensors=tensors, chunk=4, dtype=torch.float64, **kw)
        torch.testing.assert_close(o, want[0], atol=1e-10, rtol=1e-10)
        if want[1] is None:
            assert lse is None
        else:
            torch.testing.assert_close(lse, want[1], atol=1e-10, rtol=1e-10)
        # the program survives the launch spec's JSON (a tree, no sharing), and the copy's reference agrees
        copy = Forward.from_dict(prog.to_dict())
        o2, _ = forward_reference(copy, q, k, v, tensors=tensors, chunk=4, dtype=torch.float64, **kw)
        torch.testing.assert_close(o2, o, atol=0, rtol=0)


# ---- the IR's passes, checked with the reference's semantics ---------------------------------------------


@pytest.mark.parametrize("name", [n for n in CATALOGUE if n != "combination"])
def test_log2_score_is_the_score_times_log2e(name):
    """kernel_ir.passes.log2_score: the folded score is the score times log2(e), whatever it holds."""
    prog, tensors, scalars = CATALOGUE[name].build()
    q, k, _ = qkv(sq=9)
    folded = Forward(log2_score(prog.score), scalars=prog.scalars, tensors=prog.tensors, normalizer="none")
    plain = Forward(prog.score, scalars=prog.scalars, tensors=prog.tensors, normalizer="none")
    one = torch.eye(SK, dtype=torch.float64).view(1, SK, 1, SK).expand(B, SK, HKV, SK)  # O = the scores
    kw = dict(softmax_scale=0.3, scalars=scalars, tensors=tensors, dtype=torch.float64)
    got, _ = forward_reference(folded, q, k, one, **kw)
    want, _ = forward_reference(plain, q, k, one, **kw)
    torch.testing.assert_close(got, want * LOG2E, atol=1e-12, rtol=1e-12)


def _bottom_right(window):
    left, right = window

    def keep(s, b, h, i, j, t):
        diag = i + SK - SQ
        return (left < 0 or j >= diag - left) and (right < 0 or j <= diag + right)

    return keep


BLOCK_CASES = {name: (c.program, c.keep, c.build()[1:], (-1, -1)) for name, c in CATALOGUE.items()
               if c.program.masks and name != "combination"}  # fmt: skip
BLOCK_CASES["causal header"] = (plain_program("causal"), _bottom_right((-1, 0)), ({}, {}), (-1, -1))
for _w in ((5, 0), (3, 2), (-1, 4), (6, -1), (0, 0)):
    BLOCK_CASES[f"window header {_w}"] = (plain_program("window"), _bottom_right(_w), ({}, {}), _w)


@pytest.mark.parametrize("name", list(BLOCK_CASES))
@pytest.mark.parametrize(("bm", "bn"), [(8, 16), (16, 8)])
def test_block_class_agrees_with_the_masks(name, bm, bn):
    """kernel_ir.passes.block_class: a block it calls empty keeps no score, one it calls full keeps all
    (the scores kept from the variant's formula, the classes from the scalar interpreter)."""
    prog, keep, (tensors, scalars), window = BLOCK_CASES[name]
    cls = block_class(prog.masks)
    t = {n: x.tolist() for n, x in tensors.items()}
    consts = {s.name: scalars.get(s.name, s.default) for s in prog.scalars}
    consts.update(seqlen_q=SQ, seqlen_k=SK, heads=H, heads_kv=HKV, batch=B, softmax_scale=0.3,
                  window_left=window[0], window_right=window[1])  # fmt: skip
    for b in range(B):
        for h in range(H):
            uni = dict(consts, batch_idx=b, head_idx=h, kv_head_idx=h // (H // HKV))
            kept = [[keep(0.0, b, h, i, j, t) for j in range(SK)] for i in range(SQ)]
            for r0 in range(0, SQ, bm):
                for c0 in range(0, SK, bn):
                    rows, cols = range(r0, min(r0 + bm, SQ)), range(c0, min(c0 + bn, SK))
                    rect = dict(uni, q_lo=rows[0], q_hi=rows[-1], kv_lo=cols[0], kv_hi=cols[-1])
                    never, always = interp(cls.never, rect, t, {}), interp(cls.always, rect, t, {})
                    block = [kept[i][j] for i in rows for j in cols]
                    assert not (never and any(block)), (b, h, r0, c0, "called empty but keeps scores")
                    assert not (always and not all(block)), (b, h, r0, c0, "called full but masks scores")
