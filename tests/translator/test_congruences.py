"""`kernel_ir.passes.congruences`: a divisibility test of an index difference becomes a compare of two
remainders, one per row and one per key (the dilated window's mask), only where that is exact."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from kernel_ir import passes
from kernel_ir.expr import F32, I32, Var, const, op, text

ROOT = Path(__file__).resolve().parents[2]
Q, K, DIL = Var("q_idx", I32), Var("kv_idx", I32), Var("dil", I32)
DILATED = op("eq", op("mod", op("abs", op("sub", Q, K)), DIL), const(0))


def test_the_dilated_test_becomes_a_row_and_a_key_remainder():
    got = passes.congruences(DILATED)
    assert text(got) == "((q_idx % dil) == (kv_idx % dil))"
    lv = passes.levels([got])
    assert lv[op("mod", Q, DIL)] == "row" and lv[op("mod", K, DIL)] == "col"
    # `!=` and the zero on the left are the same test
    assert passes.congruences(op("ne", const(0), op("mod", op("sub", K, Q), DIL))) == op(
        "not", op("eq", op("mod", K, DIL), op("mod", Q, DIL))
    )


@pytest.mark.parametrize(
    "mask",
    [
        op("eq", op("mod", op("sub", op("sub", Q, K), const(3)), DIL), const(0)),  # a − b may be any sign
        op("eq", op("mod", op("sub", Q, op("neg", K)), DIL), const(0)),  # −kv_idx is not provably ≥ 0
        op("eq", op("mod", op("sub", Q, K), DIL), const(1)),  # a remainder of 1, not divisibility
        op("eq", op("mod", op("sub", Q, const(4)), op("add", DIL, K)), const(0)),  # a per-key divisor
    ],
    ids=["offset-difference", "negated-index", "nonzero-remainder", "per-key-divisor"],
)
def test_it_leaves_what_it_cannot_prove(mask):
    assert passes.congruences(mask) == mask


@pytest.mark.parametrize("dil", [1, 2, 3, 7, -2, -5])
def test_the_rewritten_mask_keeps_every_value(dil: int):
    """Both forms through the IR reference (C's truncated `%`), on Sq ≠ Sk, negative divisors too."""
    torch = pytest.importorskip("torch")
    from kernel_ir.program import Forward, Scalar
    from runner.ir_reference import forward_reference

    window = op("le", op("abs", op("sub", Q, K)), Var("W", I32))
    scalars = (Scalar("W", "i32", 40), Scalar("dil", "i32", dil))
    g = torch.Generator().manual_seed(dil + 10)
    q = torch.randn(1, 70, 2, 16, generator=g, dtype=torch.float64)
    k, v = (torch.randn(1, 95, 2, 16, generator=g, dtype=torch.float64) for _ in range(2))
    score = op("mul", Var("s", F32), Var("softmax_scale", F32))
    before = Forward(score=score, masks=(op("and", window, DILATED),), scalars=scalars)
    after = Forward(score=score, masks=(passes.congruences(op("and", window, DILATED)),), scalars=scalars)
    assert after.masks != before.masks
    o1, lse1 = forward_reference(before, q, k, v, dtype=torch.float64)
    o2, lse2 = forward_reference(after, q, k, v, dtype=torch.float64)
    assert torch.equal(o1, o2) and torch.equal(lse1, lse2)


def test_the_dilated_window_kernel_hoists_both_remainders():
    sys.path.insert(0, str(ROOT))
    from benchmarks.variant_cases import for_shape
    from pipeline.build import translate_text

    text_ = for_shape((ROOT / "examples" / "variants" / "dilated_window.tl").read_text(), "bf16", 128)
    src = translate_text(text_, Path("dilated_window.tl")).source
    lam = src[src.index("auto apply_score") :]
    assert re.search(r"tl_c\d+\[c\] = \(col % scalar_dil\);", lam)  # once a block per key
    assert re.search(r"const int tl_r\d+ = \(row % scalar_dil\);", lam)  # once a row
    assert "tl_e1 % scalar_dil" not in lam and not re.search(r"tl_e\d+ % scalar_dil", lam)
