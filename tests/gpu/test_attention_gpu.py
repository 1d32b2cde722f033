"""The GPU matrix: every TL kernel variant × shapes (odd lengths, seqlen_q != seqlen_k, GQA/MQA, strides),
each verified against the float32 reference on normal and scaled-up inputs. Skipped without a device."""

from __future__ import annotations

import zlib

import pytest
from gpu_matrix import NAIVE_OK, SHAPES, TL_KERNELS, shapes_for

from runner.verify import Shape

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    ("kernel", "shape_id"), [(k.name, s) for k in TL_KERNELS for s in shapes_for(k.group)]
)
def test_tl_kernel(kernels, kernel, shape_id):
    from runner.verify import verify

    shape, strided = SHAPES[shape_id]
    result = verify(kernels.get(kernel), shape, strided=strided, seed=zlib.crc32(shape_id.encode()))
    assert result.passed, str(result)


@pytest.mark.parametrize("window", [(-1, 32), (0, 0), (200, -1)])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_tl_window_overridden_at_launch(kernels, dtype, window):
    from runner.verify import verify

    kernel = f"tl_sm_80_{dtype}_d128_window_64_16"
    result = verify(kernels.get(kernel), Shape(1, 4, 2, 700, 900), window=window)
    assert result.passed, str(result)


@pytest.mark.parametrize("kernel", NAIVE_OK)
@pytest.mark.parametrize("shape_id", ["s17", "q1000_k300", "q17_k1000", "gqa4", "strided"])
def test_naive_abi_kernel(kernels, kernel, shape_id):
    """The runner itself (launch, strides, masks, GQA, LSE, sm_75 PTX) on the hand-written kernel."""
    from runner.verify import verify

    shape, strided = SHAPES[shape_id]
    result = verify(kernels.get(kernel), shape, strided=strided)
    assert result.passed, str(result)


def test_verification_catches_a_wrong_softmax(kernels):
    from runner.verify import verify

    result = verify(kernels.get("naive_broken_scale"), Shape(1, 2, 2, 300, 300))
    assert not result.passed
    assert any("relative L2" in f for c in result.cases for f in c.failures), str(result)


def test_verification_catches_unwritten_rows(kernels):
    from runner.verify import verify

    result = verify(kernels.get("naive_broken_last_row"), Shape(2, 2, 2, 130, 130))
    assert not result.passed
    assert all(c.nonfinite == 2 * 2 * 64 for c in result.cases), str(result)  # B·H rows of d_v NaNs


def test_launch_on_a_side_stream_matches_default_stream(kernels):
    import torch

    from runner.launch import attention

    loaded = kernels.get("naive_fp16_d64")
    q, k, v = (torch.randn(2, 100, 4, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    o0, lse0 = attention(loaded, q, k, v)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        o1, lse1 = attention(loaded, q, k, v)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert torch.equal(o0, o1) and torch.equal(lse0, lse1)


def test_bad_inputs_are_refused_before_launch(kernels):
    import torch

    from runner.launch import LaunchError, attention

    loaded = kernels.get("naive_fp16_d64")
    q = torch.randn(1, 8, 4, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(LaunchError, match="dtype"):
        attention(loaded, q.bfloat16(), q.bfloat16(), q.bfloat16())
    with pytest.raises(LaunchError, match="head dim 32"):
        attention(loaded, q[..., :32], q[..., :32], q[..., :32])
    with pytest.raises(LaunchError, match="last dim must be contiguous"):
        t = torch.randn(1, 8, 4, 128, device="cuda", dtype=torch.float16)[..., ::2]
        attention(loaded, t, t, t)
    with pytest.raises(LaunchError, match="multiple of key/value heads"):
        attention(loaded, q, q[:, :, :3], q[:, :, :3])
    with pytest.raises(LaunchError, match="CUDA device"):
        attention(loaded, q.cpu(), q, q)


def test_empty_key_sequence_gives_zero_output_and_infinite_lse(kernels):
    import torch

    from runner.launch import attention

    loaded = kernels.get("naive_fp16_d64")
    q = torch.randn(1, 5, 2, 64, device="cuda", dtype=torch.float16)
    kv = torch.randn(1, 0, 2, 64, device="cuda", dtype=torch.float16)
    o, lse = attention(loaded, q, kv, kv)
    torch.cuda.synchronize()
    assert torch.equal(o, torch.zeros_like(o)) and torch.isposinf(lse).all()


def test_ptx_through_the_driver_jit(kernels, monkeypatch, tmp_path):
    """The fallback without ptxas: PTX for compute_75 loaded as PTX, JIT-compiled by the driver."""
    from gpu_matrix import NAIVE_CONFIGS

    from runner import finalize
    from runner.compile import compile_source
    from runner.launch import cuda_device_arch, load
    from runner.verify import verify

    monkeypatch.setenv("TL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(finalize, "ptxas_version", lambda: None)
    cfg = next(n for n in NAIVE_CONFIGS if n.arch == "sm_75")
    compiled = compile_source(cfg.source(), arch="sm_75", device_arch=cuda_device_arch(), name="jit.cu")
    assert compiled.kind == "ptx" and compiled.target == "compute_75"
    result = verify(load(compiled, cfg.spec()), Shape(2, 4, 2, 300, 500))
    assert result.passed, str(result)
