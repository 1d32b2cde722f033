"""The score region's transcendental cost and its split between the SFU and the FP32 pipe (issue 17):
reassociation of uniform factors, the cost count, the planner's share, the emitted code and the
polynomial exp2 it calls."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from kernel_ir import passes
from kernel_ir.expr import F32, I32, Op, Var, op, text, walk
from tl_language import gpu
from translator.backends.regions import EXP2_POLY, fma_predicate
from translator.planner.cost import fma_exp_share

ROOT = Path(__file__).resolve().parents[2]
S, SCALE, CAP = Var("s", F32), Var("softmax_scale", F32), Var("cap", F32)
SOFTCAP = op("mul", op("tanh", op("div", op("mul", S, SCALE), CAP)), CAP)
H100 = gpu.TARGETS["sm_90"]


def test_a_division_by_a_uniform_value_becomes_a_hoisted_reciprocal():
    assert text(passes.reassociate(SOFTCAP)) == "(tanh((s * (softmax_scale * (1.0 / cap)))) * cap)"
    # (s · scale) / cap is s times one uniform: the softmax folds it like the plain kernel's scale
    assert passes.rendered_score(op("div", op("mul", S, SCALE), CAP), softmax=True) is None
    per_key = op("div", S, op("float", Var("kv_idx", I32)))  # a per-key divisor stays a division
    assert passes.reassociate(per_key) == per_key


def test_reassociation_keeps_the_values():
    torch = pytest.importorskip("torch")
    from kernel_ir.program import Forward, Scalar
    from runner.ir_reference import forward_reference

    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 70, 2, 32, generator=g, dtype=torch.float64) * 3 for _ in range(3))
    scalars = (Scalar("cap", "f32", 7.0),)
    before = Forward(score=SOFTCAP, scalars=scalars)
    after = Forward(score=passes.reassociate(SOFTCAP), scalars=scalars)
    o1, lse1 = forward_reference(before, q, k, v, dtype=torch.float64)
    o2, lse2 = forward_reference(after, q, k, v, dtype=torch.float64)
    assert torch.allclose(o1, o2, rtol=1e-12, atol=1e-12)
    assert torch.allclose(lse1, lse2, rtol=1e-12, atol=1e-12)


ALIBI = op(
    "add",
    op("mul", S, SCALE),
    op("mul", Var("slope", F32), op("float", op("sub", Var("kv_idx", I32), Var("q_idx", I32)))),
)


def test_an_index_difference_splits_into_per_key_and_per_row_terms():
    rendered = passes.rendered_score(ALIBI, softmax=True)
    lv = passes.levels([rendered])
    per_score = [n for n in lv if lv[n] == "elem" and n.__class__.__name__ == "Op"]
    # left per score: s · u + (key term - row term); the I2F and the slope's FMUL went to the key and row
    assert sorted(n.op for n in per_score) == ["add", "mul", "sub"]
    assert all(lv[n] in ("col", "row", "uniform") for n in lv if getattr(n, "op", "") == "float")
    assert passes.score_cost(rendered) == passes.ScoreCost(mufu=1, exps=0, fp32=4)


def test_separation_keeps_the_values():
    torch = pytest.importorskip("torch")
    from kernel_ir.program import Forward, Scalar
    from runner.ir_reference import forward_reference

    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 90, 2, 32, generator=g, dtype=torch.float64) for _ in range(3))
    scalars = (Scalar("slope", "f32", -0.37),)
    o1, lse1 = forward_reference(Forward(score=ALIBI, scalars=scalars), q, k, v, dtype=torch.float64)
    after = Forward(score=passes.separate(ALIBI), scalars=scalars)
    o2, lse2 = forward_reference(after, q, k, v, dtype=torch.float64)
    assert passes.separate(ALIBI) != ALIBI
    assert torch.allclose(o1, o2, rtol=1e-12, atol=1e-12)
    assert torch.allclose(lse1, lse2, rtol=1e-12, atol=1e-12)


def test_score_cost_counts_what_one_score_costs():
    softcap = passes.score_cost(passes.rendered_score(SOFTCAP, softmax=True))
    # tanh, lowered: an exp2 (movable) and a reciprocal; FP32: s · u, + 1, and C − r · 2C (an FFMA, counted
    # as its multiply and its subtract), with cap · log2(e) folded into C
    assert softcap == passes.ScoreCost(mufu=2, exps=1, fp32=4)
    sigmoid = passes.score_cost(passes.rendered_score(op("sigmoid", op("mul", S, SCALE)), softmax=False))
    assert (sigmoid.mufu, sigmoid.exps) == (2, 1)
    # uniform and per-row work is hoisted out of the score loop, so it costs nothing per score
    row_only = op("add", S, op("tanh", op("float", Var("q_idx", I32))))
    assert passes.score_cost(row_only).mufu == 0


def test_the_planner_moves_exps_only_when_the_sfu_is_the_bottleneck():
    plain = passes.ScoreCost(0, 0, 0)
    alibi = passes.score_cost(passes.rendered_score(op("add", op("mul", S, SCALE), CAP), softmax=True))
    softcap = passes.score_cost(passes.rendered_score(SOFTCAP, softmax=True))
    # at head dim 128 the one exp2 a score hides under the GEMMs; at 64 the SFU is as busy as the tensor
    # cores, but the issue slots are busier still, and a polynomial costs ten more of them than an exp2
    for d in (64, 128):
        assert fma_exp_share(alibi, softmax=True, d_qk=d, d_v=d, target=H100) == 0
        # softcap: three SFU instructions a score; the measured optimum is 0-2 of 8 (the model's: 1)
        assert fma_exp_share(softcap, softmax=True, d_qk=d, d_v=d, target=H100) == 1
    assert fma_exp_share(plain, softmax=True, d_qk=128, d_v=128, target=H100) == 0
    # no exp2 left to move: nothing moves, however busy the SFU
    logs = passes.ScoreCost(mufu=4, exps=0, fp32=4)
    assert fma_exp_share(logs, softmax=False, d_qk=64, d_v=64, target=H100) == 0


def _exp2_fma(x: np.ndarray) -> np.ndarray:
    """`tl::exp2_fma` step for step in float32 (the shifter, Horner with FMA-free float32 rounding, the
    exponent add), so the polynomial and its edge cases are pinned without a GPU."""
    f32 = np.float32
    x = np.minimum(np.maximum(x.astype(f32), f32(-127)), f32(127))
    t = (x + f32(12582912.0)).astype(f32)
    f = (x - (t - f32(12582912.0))).astype(f32)
    c4, c3, c2, c1 = (f32(c) for c in EXP2_POLY)
    p = (f * c4 + c3).astype(f32)
    p = (p * f + c2).astype(f32)
    p = (p * f + c1).astype(f32)
    p = (p * f + f32(1)).astype(f32)
    bits = p.view(np.int32) + (t.view(np.int32) << np.int32(23))
    return bits.astype(np.int32).view(f32)


def test_exp2_fma_is_accurate_and_flushes_like_the_sfu():
    x = np.linspace(-126, 126, 2_000_003, dtype=np.float32)
    rel = np.abs(_exp2_fma(x).astype(np.float64) / np.exp2(x.astype(np.float64)) - 1)
    assert rel.max() < 4e-6  # P is rounded to bf16 (2^-8) or fp16 (2^-11) right after
    edge = _exp2_fma(np.array([-np.inf, -1000, -127, 0, 127, 1000], dtype=np.float32))
    assert edge[0] == 0 and edge[1] == 0 and edge[2] == 0 and not np.signbit(edge[2])
    assert edge[3] == 1
    assert np.isfinite(edge[4]) and edge[4] == edge[5] and edge[4] > 1e38


def test_the_predicate_picks_columns_of_every_eight():
    assert fma_predicate(0) == "false" and fma_predicate(8) == "true"
    assert fma_predicate(3) == "(c & 7) < 3"
    assert fma_predicate(3, "c + 1") == "((c + 1) & 7) < 3"


def _sm90_source(tl: str) -> str:
    from pipeline.build import translate_text

    return translate_text(tl, Path("split.tl")).source


def test_softcap_renders_its_exps_split_and_a_param_overrides_the_share():
    from benchmarks.variant_cases import with_param

    tl = with_param((ROOT / "examples/variants/softcap.tl").read_text(), "fast_tanh", "0")
    src = _sm90_source(tl)
    share = re.search(r"const bool tl_fma = \(c & 7\) < (\d);", src)
    assert share is not None
    n = share.group(1)
    assert f"tl::exp2_on(scores(r, c), (c & 7) < {n})" in src  # the softmax's exps, same columns
    assert "tl::exp2_on(" in src and ", tl_fma)" in src  # tanh's, lowered to an exp2 and a reciprocal
    assert "(1.0f / scalar_cap)" in src  # the reciprocal, once per tile
    assert not re.search(r"const float tl_e\d+ = [^;]*/ scalar_cap", src)  # no division per score
    off = _sm90_source(tl.replace("Mask none", "Param fma_exps = 0\nMask none"))
    assert "tl_fma" not in off and "tl::exp2_on(" not in off.split("namespace tl")[-1].split("CUTE_DEVICE")[0]
    assert "exp2_on(scores" not in off


def test_the_plain_kernel_keeps_its_sfu_exps_unless_the_tl_asks():
    tl = (ROOT / "examples/hopper_mha_fwd.tl").read_text()
    assert "exp2_on" not in _sm90_source(tl)
    forced = _sm90_source(tl.replace("Mask ", "Param fma_exps = 2\nMask ", 1))
    assert "tl::exp2_on(scores(r, c), (c & 7) < 2)" in forced


def test_fma_exps_out_of_range_is_tl307_and_hover_documents_it():
    from tl_language.analysis import analyze
    from tl_language.resources import SPECIAL_PARAMS

    tl = (ROOT / "examples/variants/softcap.tl").read_text()
    tl = tl.replace("Mask none", "Param fma_exps = 9\nMask none")
    diags = [d for d in analyze(tl).diagnostics if d.code == "TL307"]
    assert len(diags) == 1 and "fma_exps = 9" in diags[0].message
    assert "FP32 pipe" in SPECIAL_PARAMS["fma_exps"]


def test_the_key_block_range_is_found_by_bisection_or_eight_classes_a_step():
    window = _sm90_source((ROOT / "examples/variants/sink_tokens_window.tl").read_text())
    assert "auto blocks_empty = [&](int n_first, int n_end) -> bool" in window
    assert "if (blocks_empty(mid, n_block_max)) n_hi = mid; else n_lo = mid + 1;" in window
    assert "if (blocks_empty(n_block_min, mid)) n_lo = mid; else n_hi = mid - 1;" in window
    # the gap between a window and its sink tokens: crossed by bisection over the run's union too
    assert "if (blocks_empty(mid, n + 1)) hi = mid; else lo = mid + 1;" in window
    # the causal bound narrows the range in closed form first
    assert window.index("kv_hi_max = cute::min(kv_hi_max,") < window.index("blocks_empty(mid, n_block_max)")
    # masks that are all bounds need no bisection: the closed form is the range
    sliding = _sm90_source((ROOT / "examples/variants/sliding_window.tl").read_text())
    assert "kv_lo_min = cute::max(kv_lo_min," in sliding and "blocks_empty(mid, n_block_max)" not in sliding
    documents = _sm90_source((ROOT / "examples/variants/document_mask.tl").read_text())
    assert "blocks_empty" not in documents  # classes from the launch-time buffer: no interval to bisect
    assert "for (int i = 0; i < 8; ++i) kept |= block_class(n_block_min + i);" in documents


def test_the_variants_benchmark_sets_or_replaces_one_param():
    from benchmarks.variant_cases import with_param

    tl = (ROOT / "examples/variants/softcap.tl").read_text()
    added = with_param(tl, "fma_exps", "2")
    assert added.count("Param fma_exps = 2") == 1
    assert added.index("Dtype") < added.index("Param fma_exps") < added.index("Param BM")
    replaced = with_param(tl, "BN", "128")
    assert "Param BN = 128" in replaced and "Param BN = 160" not in replaced
    assert replaced.count("Param BN") == 1


def _eval(e, env):
    """An integer / boolean IR expression at one point (the ops the clamps and their tests use)."""
    from kernel_ir.expr import Const, Op, Var

    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return env[e.name]
    assert isinstance(e, Op), e
    a = [_eval(x, env) for x in e.args]
    return {
        "add": lambda: a[0] + a[1],
        "sub": lambda: a[0] - a[1],
        "neg": lambda: -a[0],
        "min": lambda: min(a),
        "max": lambda: max(a),
        "ge": lambda: a[0] >= a[1],
        "le": lambda: a[0] <= a[1],
    }[e.op]()


def test_a_clamp_saturates_only_where_every_score_of_the_block_hits_its_bound():
    kv, q = Var("kv_idx", I32), Var("q_idx", I32)
    clamp = op("min", op("max", op("sub", kv, q), op("neg", Var("w", I32))), Var("w", I32))
    score = op("add", S, op("float", clamp))
    sats = passes.saturations(score)
    assert [s.node.op for s in sats] == ["min", "max"]  # outermost first
    rng = np.random.default_rng(0)
    taken = 0
    for _ in range(400):
        q_lo, kv_lo, w = (int(x) for x in rng.integers(0, 300, 3))
        q_hi, kv_hi = q_lo + int(rng.integers(0, 64)), kv_lo + int(rng.integers(0, 64))
        env = {"q_lo": q_lo, "q_hi": q_hi, "kv_lo": kv_lo, "kv_hi": kv_hi, "w": w}
        points = [(i, j) for i in range(q_lo, q_hi + 1, 7) for j in range(kv_lo, kv_hi + 1, 5)]
        for sat in sats:
            hits = all(
                _eval(sat.node, {**env, "q_idx": i, "kv_idx": j})
                == env["w"] * (1 if sat.node.op == "min" else -1)
                for i, j in points
            )
            if _eval(sat.when, env):
                assert hits, (sat.node, env)
                taken += 1
    assert taken > 50  # the random rectangles exercise both saturated forms
    # the saturated form reads the table once a block: no per-score load or clamp left
    saturated = passes.substitute(score, sats[0].node, sats[0].bound)
    assert not [n for n in passes.levels([saturated]) if getattr(n, "op", "") in ("min", "max")]


def test_relative_bias_renders_a_saturated_path_per_bound():
    from pipeline.build import translate_text

    text_ = (ROOT / "examples" / "variants" / "relative_bias.tl").read_text()
    src = translate_text(text_.replace("Target sm_80", "Target sm_90"), Path("rb.tl")).source
    lam = src[src.index("auto apply_score") :]
    lam = lam[: lam.index("};")]
    assert "rel[head_idx, 128]" in lam and "rel[head_idx, 0]" in lam
    assert lam.count("rel_ptr[") == 3  # one read per saturated block, one per score elsewhere


SIGMOID = op("sigmoid", op("mul", S, SCALE))


def test_fast_tanh_keeps_one_tanh_and_writes_sigmoid_through_it():
    value = passes.rendered_score(SOFTCAP, softmax=True, fast_tanh=True)
    ops = [n.op for n in walk(value) if isinstance(n, Op)]
    assert ops.count("tanh") == 1 and "exp2" not in ops and "rcp" not in ops
    assert passes.score_cost(value) == passes.ScoreCost(mufu=1, exps=0, fp32=2)
    exact = passes.rendered_score(SOFTCAP, softmax=True)
    assert passes.score_cost(exact).mufu == 2 and "tanh" not in [getattr(n, "op", "") for n in walk(exact)]
    sig = passes.lower_transcendentals(SIGMOID, True)
    assert [n.op for n in walk(sig) if isinstance(n, Op)].count("tanh") == 1
    for x in (-30.0, -2.5, -0.1, 0.0, 0.7, 4.0, 40.0):
        want = 1.0 / (1.0 + np.exp(-x))
        assert abs(_eval_f(sig, {"s": x, "softmax_scale": 1.0}) - want) < 1e-12


def _eval_f(e, env):
    """A float IR expression at one point (the ops sigmoid's rewrite uses)."""
    from kernel_ir.expr import Const

    if isinstance(e, Const):
        return float(e.value)
    if isinstance(e, Var):
        return env[e.name]
    a = [_eval_f(x, env) for x in e.args]
    ops = {"add": lambda: a[0] + a[1], "mul": lambda: a[0] * a[1], "tanh": lambda: float(np.tanh(a[0]))}
    return ops[e.op]()


def test_fast_tanh_renders_tanh_approx_in_the_forward_and_the_backward(tmp_path):
    from benchmarks.variant_cases import with_param
    from pipeline.backward import translate_backward

    tl = with_param((ROOT / "examples/variants/softcap.tl").read_text(), "fast_tanh", "1")
    src = _sm90_source(tl)
    body = src.split("tanh_approx(float x)", 1)[1]
    assert 'asm("tanh.approx.f32 %0, %1;"' in src
    assert "tl::tanh_approx(" in body and "tl::tanh_exp2(" not in body
    (tmp_path / "softcap.tl").write_text(tl)
    bwd = translate_backward(tmp_path / "softcap.tl").source
    assert "tl::tanh_approx(" in bwd.split("tanh_approx(float x)", 1)[1]
    off = _sm90_source(with_param(tl, "fast_tanh", "0"))
    assert "tl::tanh_approx(" not in off.split("tanh_approx(float x)", 1)[1]
    sigmoid = with_param((ROOT / "examples/variants/sigmoid_attention.tl").read_text(), "fast_tanh", "1")
    body = _sm90_source(sigmoid).split("tanh_approx(float x)", 1)[1]
    assert "tl::tanh_approx(" in body and "tl::sigmoid_exp2(" not in body  # 1/2 + tanh(x/2)/2


def test_fast_tanh_is_a_flag_and_the_reference_stays_exact():
    torch = pytest.importorskip("torch")
    from kernel_ir.program import Forward, Scalar
    from runner.ir_reference import forward_reference
    from tl_language.analysis import analyze
    from tl_language.resources import SPECIAL_PARAMS

    tl = (ROOT / "examples/variants/softcap.tl").read_text()
    tl = tl.replace("Param fast_tanh = 1", "Param fast_tanh = 2")
    diags = [d for d in analyze(tl).diagnostics if d.code == "TL307"]
    assert len(diags) == 1 and "fast_tanh = 2" in diags[0].message
    assert "tanh.approx" in SPECIAL_PARAMS["fast_tanh"]
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 40, 2, 32, generator=g, dtype=torch.float64) * 4 for _ in range(3))
    scalars = (Scalar("cap", "f32", 5.0),)
    exact = forward_reference(Forward(score=SOFTCAP, scalars=scalars), q, k, v, dtype=torch.float64)
    fast = Forward.from_dict(Forward(score=SOFTCAP, scalars=scalars, fast_tanh=True).to_dict())
    assert fast.fast_tanh
    got = forward_reference(fast, q, k, v, dtype=torch.float64)
    assert all(torch.equal(a, b) for a, b in zip(exact, got, strict=True))
