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
    assert re.search(r"tl_c\d+\[c\] = tl::mod_nonneg\(col, scalar_dil\);", lam)  # once a block per key
    assert re.search(r"const int tl_r\d+ = tl::mod_nonneg\(row, scalar_dil\);", lam)  # once a row
    assert "tl_e1 % scalar_dil" not in lam and not re.search(r"tl_e\d+ % scalar_dil", lam)


def test_a_remainder_by_a_scalar_of_an_index_uses_mod_nonneg():
    """The renderers write `x % d` as `tl::mod_nonneg` where x is provably ≥ 0 and d the same for the
    whole launch; a dividend of any sign, or a constant divisor, keeps C's `%`."""
    from translator.backends.regions import _op

    assert _op("mod", ["q", "d"], op("mod", Q, DIL)) == "tl::mod_nonneg(q, d)"
    assert _op("mod", ["x", "d"], op("mod", op("sub", Q, K), DIL)) == "(x % d)"
    assert _op("mod", ["q", "2"], op("mod", Q, const(2))) == "(q % 2)"


def test_mod_nonneg_is_cs_remainder_of_a_non_negative_dividend(tmp_path: Path):
    """The emitted `tl::mod_nonneg` against C's `%` (g++, `__umulhi` as the 64-bit product's high word) for
    dividends up to 2^31 − 1 and divisors 1 … 2^31 − 1 of either sign: every pair of an edge grid and a
    pseudo-random sample."""
    import shutil
    import subprocess

    from translator.backends.regions import emit_region_helpers
    from translator.writer import CodeWriter

    if shutil.which("g++") is None:
        pytest.skip("no g++")
    w = CodeWriter()
    emit_region_helpers(w)
    helper = re.search(r"(?s)CUTE_DEVICE int mod_nonneg\(.*?\n}\n", w.render(line_directives=False)[0] + "\n")
    assert helper, "emit_region_helpers emits no mod_nonneg"
    src = tmp_path / "mod.cpp"
    src.write_text(
        "#include <cstdio>\n#include <cstdlib>\n#include <cstdint>\n#define CUTE_DEVICE static inline\n"
        "static unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }\n"
        + helper.group(0)
        + """
int main() {
  const int xs[] = {0, 1, 2, 3, 7, 8, 127, 128, 4095, 4096, 65535, 65536, 1 << 24, (1 << 30) + 7,
                    2147483646, 2147483647};
  const int ds[] = {1, 2, 3, 5, 7, 16, 100, 4096, 65537, 1 << 24, 2147483647};
  long bad = 0;
  const int signs[] = {1, -1};
  for (int x : xs) for (int d : ds) for (int s : signs) bad += mod_nonneg(x, s * d) != x % (s * d);
  uint64_t r = 88172645463325252ull;
  for (int i = 0; i < 2000000; ++i) {
    r ^= r << 13; r ^= r >> 7; r ^= r << 17;
    const int x = (int)(r & 0x7fffffff), d = (int)((r >> 32) % ((i % 3 == 0) ? 2147483647u : 1000u)) + 1;
    bad += mod_nonneg(x, d) != x % d;
  }
  printf("%ld\\n", bad);
  return 0;
}
"""
    )
    exe = tmp_path / "mod"
    subprocess.run(["g++", "-std=c++17", "-O1", "-o", str(exe), str(src)], check=True, capture_output=True)
    assert subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.strip() == "0"
