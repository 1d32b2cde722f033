"""Verification's comparison and input layouts, on the CPU (the kernel's place taken by the reference)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from runner.reference import attention_reference  # noqa: E402
from runner.verify import TOLERANCES, Shape, compare, make_inputs  # noqa: E402

SMALL = Shape(1, 4, 2, 40, 50)


def reference_case(dtype, mask="none", shape=SMALL):
    gen = torch.Generator().manual_seed(0)
    q, k, v = make_inputs(shape, 32, 16, dtype, "cpu", generator=gen)
    ref_o, ref_lse = attention_reference(q, k, v, mask=mask)
    return ref_o, ref_lse


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_reference_rounded_to_dtype_passes(dtype):
    tdt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    ref_o, ref_lse = reference_case(tdt)
    result = compare(ref_o.to(tdt), ref_lse.clone(), ref_o, ref_lse, TOLERANCES[dtype], "normal")
    assert result.passed, result.failures
    assert result.rel_l2 < TOLERANCES[dtype].rel_l2 / 2


def test_wrong_output_unwritten_rows_and_bad_lse_fail():
    ref_o, ref_lse = reference_case(torch.float16)
    tol = TOLERANCES["fp16"]
    wrong = compare((ref_o * 1.05).half(), ref_lse, ref_o, ref_lse, tol, "normal")
    assert not wrong.passed and any("relative L2" in f for f in wrong.failures)
    o = ref_o.half().clone()
    o[0, -1] = math.nan
    unwritten = compare(o, ref_lse, ref_o, ref_lse, tol, "normal")
    assert unwritten.nonfinite == 4 * 16 and not unwritten.passed
    lse = ref_lse.clone()
    lse[0, 0, 3] += 0.01
    assert compare(ref_o.half(), lse, ref_o, ref_lse, tol, "normal").lse_bad == 1


def test_rows_without_keys_need_infinite_lse():
    ref_o, ref_lse = reference_case(torch.float16, mask="causal", shape=Shape(1, 2, 2, 9, 4))
    assert torch.isinf(ref_lse).any()
    tol = TOLERANCES["fp16"]
    assert compare(ref_o.half(), ref_lse, ref_o, ref_lse, tol, "x").passed
    finite = torch.where(torch.isinf(ref_lse), torch.zeros_like(ref_lse), ref_lse)
    assert compare(ref_o.half(), finite, ref_o, ref_lse, tol, "x").lse_bad == int(torch.isinf(ref_lse).sum())


def test_strided_inputs_have_other_strides_and_contiguous_last_dim():
    shape = Shape(2, 3, 3, 5, 7)
    q, _, v = make_inputs(shape, 16, 8, torch.float16, "cpu", strided=True)
    assert q.shape == (2, 5, 3, 16) and v.shape == (2, 7, 3, 8)
    assert q.stride(3) == 1 and q.stride(2) == 32 and q.stride(1) == 6 * 16 and q.stride(0) == 8 * 6 * 16
    assert not q.is_contiguous()


def test_shape_parse():
    assert Shape.parse("2,16,4,1000,512") == Shape(2, 16, 4, 1000, 512)
    assert Shape.parse("1, 8, 8, 300") == Shape(1, 8, 8, 300, 300)
    for bad in ("2,16", "a,b,c,d,e", "1,0,1,5,5"):
        with pytest.raises(ValueError, match="bad shape"):
            Shape.parse(bad)
