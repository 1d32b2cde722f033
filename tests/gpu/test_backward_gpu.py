"""The derived backward on the GPU: dQ, dK, dV and learnable gradients against autograd of the IR
reference, every element, NaN-poisoned outputs, odd shapes (`benchmarks/backward_verify.py` runs the
whole catalogue matrix)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = [
    ("examples/mha_fwd.tl", "bf16", ()),
    ("examples/variants/softcap.tl", "fp16", ()),
    ("examples/variants/alibi.tl", "bf16", ("slopes",)),
]
SHAPES = [
    (1, 2, 2, 1, 1),
    (2, 4, 2, 17, 17),
    (1, 7, 1, 1000, 1000),
    (1, 2, 1, 4097, 4097),
    (1, 14, 2, 1000, 333),
    (2, 4, 4, 17, 1000),  # ALiBi's slopes: distances near 1000 weigh D's rounding (the row correction)
]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{Path(c[0]).stem}-{c[1]}")
def loaded(request):
    from pipeline.backward import build_backward

    path, dtype, learn = request.param
    return build_backward(ROOT / path, dtype=dtype, learnable=learn).load()


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.nvrtc
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_backward_matches_autograd_of_the_reference(loaded, shape):
    from runner.backward_verify import verify_backward
    from runner.verify import Shape

    result = verify_backward(loaded, Shape(*shape))
    assert result.passed, result.line()


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.nvrtc
def test_a_deterministic_backward_is_correct_and_gives_the_same_bits_twice():
    from pipeline.backward import build_backward
    from runner.backward_verify import verify_backward
    from runner.verify import Shape

    loaded = build_backward(ROOT / "examples/causal_mha_fwd.tl", dtype="bf16", deterministic=True).load()
    result = verify_backward(loaded, Shape(2, 4, 2, 1000, 1000))
    assert result.rerun_differs == 0, result.line()
    assert result.passed, result.line()
