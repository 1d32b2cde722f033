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


@pytest.mark.parametrize("name", catalogue())
def test_flex_mods_have_the_reference_gradients(name: str) -> None:
    """What `benchmarks/variants_backward.py` checks TL's backward against before timing it: autograd
    through FlexAttention's score_mod / mask_mod (here eager, float64) gives the IR reference's dq, dk,
    dv (`runner.backward_reference`), so a disagreement on the GPU is the kernel's, not the baseline's."""
    from kernel_ir.program import Forward
    from pipeline.build import translate_text
    from runner.backward_reference import backward_reference

    text = for_shape((VARIANTS_DIR / f"{name}.tl").read_text(), "bf16", 64)
    program = Forward.from_dict(translate_text(text, Path(f"{name}.tl")).spec.program)
    g = torch.Generator().manual_seed(1)
    B, S, H, D = 1, 96, 2, 16
    side = side_tensors(program, B, H, H, S, g, device="cpu")
    mods = flex_mods(name, {s.name: s.default for s in program.scalars}, side, S, S)
    if mods is None:
        pytest.skip(f"{name}: FlexAttention has no spelling for it (no baseline is timed)")
    q, k, v, do = (torch.randn(B, S, H, D, generator=g, dtype=torch.float64) for _ in range(4))
    want = backward_reference(program, q, k, v, do, tensors=side, dtype=torch.float64)[:3]
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = _eager_flex(*leaves, mods, 1 / math.sqrt(D))
    got = torch.autograd.grad(out, leaves, do)
    for n, a, b in zip(("dq", "dk", "dv"), got, want, strict=True):
        assert torch.allclose(a, b, atol=1e-5), (n, float((a - b).abs().max()))
