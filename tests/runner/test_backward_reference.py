"""The backward's derivation and reference: `kernel_ir.grad`'s symbolic dX/ds and ∂X/∂load against torch
autograd of the IR reference, and `runner.backward_reference` against autograd of hand-written attention."""

from __future__ import annotations

import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from kernel_ir import grad  # noqa: E402
from kernel_ir.expr import F32, I32, Expr, Load, Var, const, op  # noqa: E402
from kernel_ir.program import CAUSAL_MASK, PLAIN_SCORE, Forward, Scalar, SideTensor  # noqa: E402
from runner.backward_reference import _GradEvaluator, backward_reference  # noqa: E402
from runner.ir_reference import make_side_tensors  # noqa: E402

S = Var("s", F32)
SCALE = Var("softmax_scale", F32)
Q, KV, H = Var("q_idx", I32), Var("kv_idx", I32), Var("head_idx", I32)
CAP = Var("cap", F32)
SLOPES = Load("slopes", (H,), F32)
REL = Load("rel", (H, op("add", op("min", op("max", op("sub", KV, Q), const(-3)), const(3)), const(3))), F32)
TENSORS = (SideTensor("slopes", ("heads",), "float32"), SideTensor("rel", ("heads", 7), "float32"))

SCORES: dict[str, Expr] = {
    "plain": PLAIN_SCORE,
    "softcap": op("mul", op("tanh", op("div", op("mul", S, SCALE), CAP)), CAP),
    "sigmoid": op("sigmoid", op("sub", op("mul", S, SCALE), const(1.5))),
    "alibi": op("add", op("mul", S, SCALE), op("mul", SLOPES, op("sub", KV, Q))),
    "relative": op("add", op("mul", S, SCALE), REL),
    "where_abs": op("where", op("lt", KV, Q), op("abs", S), op("mul", S, const(0.5))),
    "min_max_relu": op("relu", op("max", op("min", S, const(1.0)), op("neg", S))),
    "exp_log_div": op(
        "div", op("log", op("add", op("exp", op("mul", S, const(0.1))), const(2.0))), op("exp2", S)
    ),
    "shared": op("mul", op("tanh", S), op("tanh", S)),
}


def _evaluate(e: Expr, s: Any, tensors: dict[str, Any]) -> Any:
    prog = Forward(score=e, scalars=(Scalar("cap", F32, 2.5),), tensors=TENSORS)
    sizes = {"batch": 1, "heads": 2, "heads_kv": 2, "seqlen_q": s.shape[2], "seqlen_k": s.shape[3]}
    ev = _GradEvaluator(
        prog,
        learnable=tuple(n for n, x in tensors.items() if x.requires_grad),
        sizes=sizes,
        scale=0.7,
        window=(-1, -1),
        scalars={},
        tensors=tensors,
        dtype=torch.float64,
        device=s.device,
    )
    return ev.chunk(0, s.shape[2], lambda: s)["score"].expand(s.shape)


def _side(seed: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    return {
        "slopes": torch.randn(2, generator=g, dtype=torch.float64),
        "rel": torch.randn(2, 7, generator=g, dtype=torch.float64),
    }


@pytest.mark.parametrize("name", sorted(SCORES))
def test_the_symbolic_derivative_matches_autograd(name):
    e = SCORES[name]
    s = (torch.randn(1, 2, 9, 11, dtype=torch.float64) * 2).requires_grad_(True)
    side = _side(1)
    (auto,) = torch.autograd.grad(_evaluate(e, s, side).sum(), [s])
    sym = _evaluate(grad.derivative(e), s.detach(), side)
    torch.testing.assert_close(sym, auto, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", ["alibi", "relative"])
def test_tensor_partials_scatter_to_the_autograd_gradient(name):
    e = SCORES[name]
    s = torch.randn(1, 2, 9, 11, dtype=torch.float64)
    side = {n: t.requires_grad_(True) for n, t in _side(2).items()}
    weight = torch.randn(s.shape, dtype=torch.float64)
    x = _evaluate(e, s, side)
    want = dict(
        zip(
            side, torch.autograd.grad((x * weight).sum(), list(side.values()), allow_unused=True), strict=True
        )
    )
    partials = grad.tensor_partials(e, ("slopes", "rel"))
    assert partials, "the score reads a learnable tensor"
    for ld, g in partials:
        # Σ weight · ∂X/∂load, scattered at the load's index (the index evaluated as a score of its own)
        gv = _evaluate(g, s, side).detach() * weight
        idx = [
            _evaluate(op("float", i) if i.type != F32 else i, s, side).detach().expand(s.shape).long()
            for i in ld.index
        ]
        got = torch.zeros_like(side[ld.tensor])
        got.index_put_(tuple(idx), gv, accumulate=True)
        torch.testing.assert_close(got, want[ld.tensor], rtol=1e-9, atol=1e-12)


def test_no_derivative_is_a_named_error():
    with pytest.raises(grad.NoDerivative, match="divisor"):
        grad.derivative(op("mod", const(3.0), S))
    assert grad.derivative(op("add", CAP, const(1.0))) == const(0.0)
    assert grad.derivative(CAUSAL_MASK) == const(0.0)


def _attention(q, k, v, scale, causal, sink=None):
    """Hand-written attention (float64): GQA by repeating K/V, bottom-right causal, a per-head sink."""
    b, sq, h, _ = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    kk = k.repeat_interleave(h // hkv, dim=2)
    vv = v.repeat_interleave(h // hkv, dim=2)
    x = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if causal:
        keep = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + sk - sq
        x = x.masked_fill(~keep, -math.inf)
    if sink is not None:
        x = torch.cat([x, sink.view(1, h, 1, 1).expand(b, h, sq, 1)], dim=-1)
    p = torch.softmax(x, dim=-1)[..., :sk].nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", p, vv)


@pytest.mark.parametrize(
    ("sq", "sk", "h", "hkv", "causal"), [(17, 17, 4, 2, False), (5, 19, 7, 1, True), (13, 6, 2, 2, True)]
)
def test_reference_gradients_match_hand_written_attention(sq, sk, h, hkv, causal):
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, sq, h, 16, generator=g, dtype=torch.float64)
    k = torch.randn(2, sk, hkv, 16, generator=g, dtype=torch.float64)
    v = torch.randn(2, sk, hkv, 8, generator=g, dtype=torch.float64)
    do = torch.randn(2, sq, h, 8, generator=g, dtype=torch.float64)
    sinks = torch.randn(h, generator=g, dtype=torch.float64)
    prog = Forward(
        score=PLAIN_SCORE,
        masks=(CAUSAL_MASK,) if causal else (),
        sink=Load("sinks", (H,), F32),
        tensors=(SideTensor("sinks", ("heads",), "float32"),),
        header_mask="causal" if causal else "none",
    )
    dq, dk, dv, dside = backward_reference(
        prog, q, k, v, do, tensors={"sinks": sinks}, learnable=("sinks",), chunk=4, dtype=torch.float64
    )
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v, sinks)]
    o = _attention(*leaves[:3], 0.25, causal, leaves[3])
    want = torch.autograd.grad((o * do).sum(), leaves)
    for got, w in zip((dq, dk, dv, dside["sinks"]), want, strict=True):
        assert not got.isnan().any()
        torch.testing.assert_close(got, w, rtol=1e-9, atol=1e-10)


def test_a_learnable_tensor_must_be_a_float_side_tensor():
    q = torch.randn(1, 3, 1, 4)
    prog = Forward(score=PLAIN_SCORE, tensors=(SideTensor("ids", ("seqlen_k",), "int32"),))
    with pytest.raises(ValueError, match="learnable `ids`"):
        backward_reference(
            prog,
            q,
            q,
            q,
            q,
            tensors=make_side_tensors(prog, batch=1, heads=1, heads_kv=1, seqlen_q=3, seqlen_k=3),
            learnable=("ids",),
        )


# ---- the backward kernels' equations, in float64, against autograd -------------------------------------
# The generated kernels compute exactly these (translator/backends/sm80_bwd.py): D = rowsum(dO ∘ O);
# P = exp(X − LSE) on kept scores; dX = P ∘ (dP − D); without a softmax P = X · os and dX = dP · os;
# dS = dX · dX/ds (kernel_ir.grad); dQ = dS·K, dK = dSᵀ·Q, dV = Pᵀ·dO (summed over the GQA group);
# a learnable read's gradient Σ dX · ∂X/∂read at its index; a sink's −Σ exp(sink − LSE) · D.


def _eval(prog: Forward, e: Expr, s, sizes, side):
    ev = _GradEvaluator(
        Forward(score=e, scalars=prog.scalars, tensors=prog.tensors),
        learnable=(),
        sizes=sizes,
        scale=0.25,
        window=(-1, -1),
        scalars={},
        tensors=side,
        dtype=torch.float64,
        device=s.device,
    )
    return ev.chunk(0, s.shape[2], lambda: s)["score"].expand(s.shape)


def _kernel_equations(prog: Forward, q, k, v, do, side, learnable):
    from kernel_ir import passes
    from runner.ir_reference import forward_reference

    b, sq, h, _ = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    grp = h // hkv
    sizes = {"batch": b, "heads": h, "heads_kv": hkv, "seqlen_q": sq, "seqlen_k": sk}
    o, lse = forward_reference(prog, q, k, v, softmax_scale=0.25, tensors=side, dtype=torch.float64)
    kk, vv = k.repeat_interleave(grp, dim=2), v.repeat_interleave(grp, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk)
    score = passes.reassociate(prog.score)
    x = _eval(prog, score, s, sizes, side)
    dxds = _eval(prog, grad.derivative(score), s, sizes, side)
    keep = torch.ones_like(s, dtype=torch.bool)
    for m in prog.masks:
        keep &= _eval(prog, op("where", m, const(1.0), const(0.0)), s, sizes, side) > 0.5
    dp = torch.einsum("bqhd,bkhd->bhqk", do, vv)
    if prog.normalizer == "softmax":
        dsum = (do * o).sum(-1).permute(0, 2, 1)  # (b, h, sq)
        p = torch.where(keep, torch.exp(x - lse.unsqueeze(-1)), 0.0)
        dx = p * (dp - dsum.unsqueeze(-1))
    else:
        os_ = _eval(prog, prog.output_scale, s, sizes, side) if prog.output_scale is not None else 1.0
        p = torch.where(keep, x * os_, 0.0)
        dx = torch.where(keep, dp * os_, 0.0)
    ds = torch.where(keep, dx * dxds, 0.0)
    dq = torch.einsum("bhqk,bkhd->bqhd", ds, kk)
    dk = torch.einsum("bhqk,bqhd->bkhd", ds, q).reshape(b, sk, hkv, grp, -1).sum(3)
    dv = torch.einsum("bhqk,bqhd->bkhd", p, do).reshape(b, sk, hkv, grp, -1).sum(3)
    dside = {n: torch.zeros_like(side[n]) for n in learnable}
    for ld, g in grad.tensor_partials(score, learnable):
        contrib = torch.where(keep, dx * _eval(prog, g, s, sizes, side), 0.0)
        idx = [
            _eval(prog, op("float", i) if i.type != F32 else i, s, sizes, side).expand(s.shape).long()
            for i in ld.index
        ]
        dside[ld.tensor].index_put_(tuple(idx), contrib, accumulate=True)
    if prog.sink is not None and learnable:
        for ld, g in grad.tensor_partials(prog.sink, learnable):
            sink = _eval(prog, prog.sink, s, sizes, side)[..., :1]  # (b, h, sq, 1): uniform per head
            w = torch.where(torch.isinf(lse), 0.0, torch.exp(sink[..., 0] - lse)) * dsum
            gv = _eval(prog, g, s, sizes, side)[..., 0]
            idx = [
                _eval(prog, op("float", i) if i.type != F32 else i, s, sizes, side)[..., 0]
                .expand(w.shape)
                .long()
                for i in ld.index
            ]
            dside[ld.tensor].index_put_(tuple(idx), -w * gv, accumulate=True)
    return dq, dk, dv, dside


OUTPUT_SCALE = op("div", const(1.0), op("float", op("add", Q, const(1))))
EQUATION_CASES = {
    "softcap_causal": (
        Forward(
            score=SCORES["softcap"], masks=(CAUSAL_MASK,), scalars=(Scalar("cap", F32, 2.5),), tensors=TENSORS
        ),
        (),
    ),
    "alibi_learnable": (Forward(score=SCORES["alibi"], masks=(CAUSAL_MASK,), tensors=TENSORS), ("slopes",)),
    "relative_learnable": (Forward(score=SCORES["relative"], tensors=TENSORS), ("rel", "slopes")),
    "sink_learnable": (
        Forward(score=PLAIN_SCORE, masks=(CAUSAL_MASK,), sink=SLOPES, tensors=TENSORS),
        ("slopes",),
    ),
    "sigmoid_scaled": (
        Forward(score=SCORES["sigmoid"], normalizer="none", output_scale=OUTPUT_SCALE, tensors=TENSORS),
        (),
    ),
}


@pytest.mark.parametrize("name", sorted(EQUATION_CASES))
@pytest.mark.parametrize(("sq", "sk"), [(9, 9), (5, 11), (12, 4)])
def test_the_kernels_equations_give_autograds_gradients(name, sq, sk):
    prog, learnable = EQUATION_CASES[name]
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, sq, 2, 8, generator=g, dtype=torch.float64)
    k = torch.randn(1, sk, 1, 8, generator=g, dtype=torch.float64)
    v = torch.randn(1, sk, 1, 8, generator=g, dtype=torch.float64)
    do = torch.randn(1, sq, 2, 8, generator=g, dtype=torch.float64)
    side = _side(6)
    got = _kernel_equations(prog, q, k, v, do, side, learnable)
    want = backward_reference(
        prog, q, k, v, do, softmax_scale=0.25, tensors=side, learnable=learnable, dtype=torch.float64
    )
    for a, b in zip(got[:3], want[:3], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)
    for n in learnable:
        torch.testing.assert_close(got[3][n], want[3][n], rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize(("causal", "sink"), [(True, False), (False, True)])
def test_d_from_gives_the_kernels_dq_and_dk_with_d_from_the_handed_o(causal, sink):
    """`d_from=o`: dQ and dK of dX = P ∘ (dP − rowsum(dO ∘ o)) for the o the kernels are handed (here the
    exact O plus a perturbation, as rounding to the input dtype would move it), written out by hand in
    float64; dV and the learnable sink's gradient stay the exact ones."""
    g = torch.Generator().manual_seed(5)
    sq, sk, h, hkv, d, dv_ = 9, 13, 4, 2, 16, 8
    q = torch.randn(1, sq, h, d, generator=g, dtype=torch.float64)
    k = torch.randn(1, sk, hkv, d, generator=g, dtype=torch.float64)
    v = torch.randn(1, sk, hkv, dv_, generator=g, dtype=torch.float64)
    do = torch.randn(1, sq, h, dv_, generator=g, dtype=torch.float64)
    sinks = torch.randn(h, generator=g, dtype=torch.float64)
    prog = Forward(
        score=PLAIN_SCORE,
        masks=(CAUSAL_MASK,) if causal else (),
        sink=Load("sinks", (H,), F32) if sink else None,
        tensors=(SideTensor("sinks", ("heads",), "float32"),) if sink else (),
        header_mask="causal" if causal else "none",
    )
    kw = {"tensors": {"sinks": sinks}, "learnable": ("sinks",)} if sink else {}
    exact = backward_reference(prog, q, k, v, do, chunk=4, dtype=torch.float64, **kw)
    o = _attention(q, k, v, 0.25, causal, sinks if sink else None)
    handed = o + 1e-3 * torch.randn(o.shape, generator=g, dtype=torch.float64)
    got = backward_reference(prog, q, k, v, do, chunk=4, dtype=torch.float64, d_from=handed, **kw)
    # by hand: the same P, dP and dX with D from `handed`
    kk, vv = k.repeat_interleave(h // hkv, dim=2), v.repeat_interleave(h // hkv, dim=2)
    x = torch.einsum("bqhd,bkhd->bhqk", q, kk) * 0.25
    if causal:
        keep = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + sk - sq
        x = x.masked_fill(~keep, -math.inf)
    if sink:
        x = torch.cat([x, sinks.view(1, h, 1, 1).expand(1, h, sq, 1)], dim=-1)
    p = torch.softmax(x, dim=-1)[..., :sk]
    dp = torch.einsum("bqhd,bkhd->bhqk", do, vv)
    d_row = torch.einsum("bqhd,bqhd->bhq", do, handed)[..., None]
    dx = p * (dp - d_row) * 0.25
    want_dq = torch.einsum("bhqk,bkhd->bqhd", dx, kk)
    want_dk = torch.einsum("bhqk,bqhd->bkhd", dx, q).reshape(1, sk, hkv, h // hkv, d).sum(3)
    torch.testing.assert_close(got[0], want_dq, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(got[1], want_dk, rtol=1e-9, atol=1e-11)
    assert (got[0] - exact[0]).abs().max() > 1e-6  # the shift is there, and it is not the exact gradient
    torch.testing.assert_close(got[2], exact[2], rtol=0, atol=0)
    if sink:
        torch.testing.assert_close(got[3]["sinks"], exact[3]["sinks"], rtol=0, atol=0)
