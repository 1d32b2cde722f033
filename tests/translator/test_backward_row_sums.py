"""The row correction of gradients uniform over a (batch, head) (`translator.backends.sm80_bwd_rows`):
why it exists (a float64 emulation of the kernels' sums on ALiBi), and that the kernels render it only
where it applies."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from kernel_ir.program import Forward
from pipeline.backward import translate_backward
from runner.abi import BACKWARD_PARAMS
from runner.backward_reference import backward_reference
from runner.ir_reference import forward_reference, make_side_tensors
from runner.verify import Shape, make_inputs

ROOT = Path(__file__).resolve().parents[2]
ALIBI = ROOT / "examples" / "variants" / "alibi.tl"


def _emulate(shape: tuple[int, int, int, int, int]) -> tuple[float, float]:
    """rel-L2 of the slopes' gradient against the float64 reference: (as D = rowsum(dO ∘ O_bf16) alone
    gives it, with the row correction), the kernels' sums done in float64."""
    b, h, hkv, sq, sk = shape
    build = translate_backward(ALIBI, learnable=("slopes",))
    program = Forward.from_dict(build.spec.program)
    gen = torch.Generator().manual_seed(1)
    q, k, v = make_inputs(Shape(*shape), 128, 128, torch.bfloat16, torch.device("cpu"), generator=gen)
    do = torch.randn(q.shape, generator=gen).to(torch.bfloat16)
    side = make_side_tensors(program, b, h, hkv, sq, sk, generator=gen)
    o, _ = forward_reference(program, q, k, v, tensors=side)
    ref = backward_reference(program, q, k, v, do, tensors=side, learnable=("slopes",), dtype=torch.float64)[
        3
    ]
    ref_slopes = ref["slopes"].double()

    group = h // hkv
    qf, dof = q.double().transpose(1, 2), do.double().transpose(1, 2)
    kf, vf = (t.double().transpose(1, 2).repeat_interleave(group, 1) for t in (k, v))
    dist = (torch.arange(sk)[None, :] - (torch.arange(sq)[:, None] + sk - sq)).double()  # ∂X/∂slope
    x = qf @ kf.transpose(-1, -2) / math.sqrt(128) + side["slopes"].double()[None, :, None, None] * dist
    p = torch.softmax(x.masked_fill(dist > 0, -math.inf), -1)
    dp = dof @ vf.transpose(-1, -2)
    d = (dof * o.to(torch.bfloat16).double().transpose(1, 2)).sum(-1, keepdim=True)  # the kernels' D
    naive = (p * (dp - d) * dist).sum((0, 2, 3))  # Σ dX · g
    c = (p * dp).sum(-1, keepdim=True)  # row_sums[0]
    bsum = (p * dist).sum(-1, keepdim=True)  # row_sums[1]
    corrected = naive + ((d - c) * bsum).sum((0, 2, 3))  # row_grads

    def rel(g: torch.Tensor) -> float:
        return float((g - ref_slopes).norm() / ref_slopes.norm())

    return rel(naive), rel(corrected)


@pytest.mark.parametrize("shape", [(2, 4, 4, 17, 1000), (1, 2, 2, 333, 1000)], ids=["17x1000", "333x1000"])
def test_the_row_correction_cancels_the_rounding_of_o_in_d(shape):
    naive, corrected = _emulate(shape)
    assert naive > 0.1  # what the H200 run saw: D's error, weighed by the distances, swamps the gradient
    assert corrected < 1e-6


def _signature(source: str, kernel: str) -> list[str]:
    m = re.search(rf"void __launch_bounds__\(\d+\) {kernel}\((.*?)\) {{", source, re.S)
    assert m, f"no kernel {kernel}"
    return [p.strip().split()[-1] for p in m.group(1).split(",")]


def test_alibi_gets_row_sums_and_the_row_grads_kernel():
    b = translate_backward(ALIBI, learnable=("slopes",))
    assert b.spec.row_sums == 2 and b.spec.params[-1] == "row_sums"
    assert _signature(b.source, b.spec.kernel("row_grads")) == list(b.spec.params)
    main = b.source.split("_bwd_dq_dk_dv(")[1].split("_bwd_convert_dq(")[0]
    assert "tl_pdp += p * dscores(r, c);" in main and "atomicAdd(sums + 1, tl_pg0);" in main
    rows = b.source.split("_bwd_row_grads(")[1]
    assert "atomicAdd(&slopes_grad[" in rows and "dpsum[row_base + row] - sums[0]" in rows


@pytest.mark.parametrize(
    ("path", "learn"),
    [
        ("examples/mha_fwd.tl", ()),
        ("examples/variants/alibi.tl", ()),  # not learnable
        ("examples/variants/relative_bias.tl", ("rel",)),  # per-score reads: no whole-row sum
        ("examples/variants/sigmoid_attention.tl", ()),  # no softmax, no D
    ],
)
def test_no_row_sums_where_no_gradient_sums_whole_rows(path, learn):
    b = translate_backward(ROOT / path, learnable=learn)
    assert b.spec.row_sums == 0
    assert "row_sums" not in b.source and "row_grads" not in b.source
    assert list(b.spec.params[: len(BACKWARD_PARAMS)]) == [p[0] for p in BACKWARD_PARAMS]
