"""The baselines measure the same variant as the catalogue file: FlexAttention's score_mod / mask_mod of
`benchmarks.variant_cases`, evaluated eagerly on the CPU, give the IR reference's output."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from benchmarks.variant_cases import VARIANTS_DIR, catalogue, flex_mods, for_shape, side_tensors  # noqa: E402


def _eager_flex(q, k, v, mods, scale):  # (B, S, H, D) in and out, float64
    sm, mm = mods
    B, S, H, _ = q.shape
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    b, h, i, j = torch.meshgrid(*(torch.arange(n) for n in (B, H, S, S)), indexing="ij")
    if sm is not None:
        s = sm(s, b, h, i, j)
    if mm is not None:
        s = s.masked_fill(~mm(b, h, i, j), -math.inf)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # a row that keeps no key: zeros, as the kernels write
    return torch.einsum("bhqk,bkhd->bqhd", p, v)


@pytest.mark.parametrize("name", catalogue())
def test_flex_mods_match_the_reference(name: str) -> None:
    from kernel_ir.program import Forward
    from pipeline.build import translate_text
    from runner.ir_reference import forward_reference

    text = for_shape((VARIANTS_DIR / f"{name}.tl").read_text(), "bf16", 64)
    spec = translate_text(text, Path(f"{name}.tl")).spec
    program = Forward.from_dict(spec.program)
    g = torch.Generator().manual_seed(0)
    B, S, H, D = 2, 200, 3, 32
    side = side_tensors(program, B, H, H, S, g, device="cpu")
    scalars = {s.name: s.default for s in program.scalars}
    mods = flex_mods(name, scalars, side, S, S)
    if mods is None:
        pytest.skip(f"{name}: FlexAttention has no spelling for it (no baseline is timed)")
    q, k, v = (torch.randn(B, S, H, D, generator=g, dtype=torch.float64) for _ in range(3))
    want, _ = forward_reference(program, q, k, v, tensors=side, dtype=torch.float64)
    got = _eager_flex(q, k, v, mods, 1 / math.sqrt(D))
    # float32 side tensors (slopes, tables) bound the agreement; an off-by-one mask moves it by ~1e-2
    assert torch.allclose(got, want, atol=1e-5), float((got - want).abs().max())


@pytest.mark.parametrize(("name", "block_n"), [("alibi", 128), ("relative_bias", 160)])
def test_a_file_for_sm80_gets_the_planners_hopper_key_tile(name: str, block_n: int) -> None:
    """The planner's pick is the measured winner on the H200 (16k, bf16, d 128: ALiBi BN 128 582 against
    BN 64 516 TFLOPS, relative bias BN 160 620 against 539; docs/results/2026-12-01-h200-variants-fa4-16k
    .json)."""
    from pipeline.build import translate_text

    text = for_shape((VARIANTS_DIR / f"{name}.tl").read_text(), "bf16", 128)
    assert translate_text(text, Path(f"{name}.tl")).spec.block_n == block_n
    sliding = for_shape((VARIANTS_DIR / "sliding_window.tl").read_text(), "bf16", 128)
    assert "Param BN = 128" in sliding  # a file written for sm_90 keeps its own tiles
