"""The Hopper kernel's wgmma atoms are named by the selector's rule; an N outside CuTe's base shapes is
defined in the forward kernel's source (sm90/gmma.py) rather than by CuTe's extended GMMA headers;
`CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED` is never defined (it pulls in the sparse shapes too: half of an
NVRTC compile)."""

from __future__ import annotations

import pytest

from benchmarks.sm90_variants import Variant, tl_text
from tl_language import analyze
from translator.backends.sm90 import emit_sm90
from translator.backends.sm90.gmma import BASE_N, EXT_INCLUDES, atom_n, pv_atom, qk_atom
from translator.plan import make_plan


@pytest.mark.parametrize(
    ("tile_n", "n"), [(64, 64), (80, 80), (128, 128), (160, 160), (176, 176), (320, 160)]
)
def test_atom_n_is_the_widest_multiple_of_8_dividing_the_tile(tile_n: int, n: int) -> None:
    assert atom_n(tile_n) == n
    assert atom_n(512) == 256


def test_atom_n_refuses_a_tile_that_is_not_a_multiple_of_8() -> None:
    with pytest.raises(ValueError, match="multiple of 8"):
        atom_n(12)


def test_atom_names_follow_cute() -> None:
    assert (
        qk_atom("bf16", 160).cute()
        == "SM90::GMMA::MMA_64x160x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>"
    )
    assert (
        pv_atom("fp16", 128).cute()
        == "SM90::GMMA::MMA_64x128x16_F32F16F16_RS<GMMA::Major::K, GMMA::Major::MN>"
    )
    assert qk_atom("bf16", 160).extended and not pv_atom("bf16", 128).extended
    assert all(not qk_atom("bf16", n).extended for n in BASE_N)


def _source(v: Variant) -> str:
    text = tl_text(v)
    plan = make_plan(analyze(text).model, text)
    return emit_sm90(plan, tl_file=f"{v.name}.tl")[0]


def test_base_shapes_include_no_extended_header() -> None:
    source = _source(Variant("h128_bf16"))  # BN 128, d 128
    assert "MMA_64x128x16_F32BF16BF16_SS<" in source and "MMA_64x128x16_F32BF16BF16_RS<" in source
    assert "CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED" not in source
    assert not any(inc.split("  ")[0] in source for inc in EXT_INCLUDES)


def test_an_extended_n_defines_its_atom_instead_of_including_the_extended_headers() -> None:
    source = _source(Variant("h128_bf16_bn176", block_n=176))
    assert "make_tiled_mma(tl::SM90_64x176x16_F32BF16BF16_SS<" in source
    assert "struct SM90_64x176x16_F32BF16BF16_SS {" in source  # generated: see test_gmma_atoms.py
    assert "CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED" not in source
    includes = [line.split("//")[0].strip() for line in source.splitlines() if line.startswith("#include")]
    assert not any("_ext.hpp" in inc or "sparse" in inc for inc in includes)
