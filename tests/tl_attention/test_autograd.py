"""The autograd wiring and the backward seam, end to end on the CPU.

The ops' real kernels are CUDA-only; here a test-scoped library registers CPU kernels for them: the forward
is the kernel IR's own reference (`runner.ir_reference`), the backward is the ops' real body
(`ops.run_backward`), which asks the registered backward provider. So what runs is the op, its autograd
formula, the layouts and the side-tensor gradients; only the arithmetic is the reference's. Gradients are
compared with autograd through an independent eager softcap/ALiBi attention written here.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch

import tl_attention
from kernel_ir.program import Forward
from runner.ir_reference import forward_reference
from tl_attention import checks, ops
from tl_attention.backward import (
    BackwardUnavailable,
    register_backward_provider,
    unregister_backward_provider,
)

BF16 = torch.bfloat16


def _reference_forward(
    key: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    window: list[int],
    tensors: list[torch.Tensor],
    scalars: list[float],
) -> tuple[torch.Tensor, torch.Tensor]:
    kernel = ops.resolve(key)
    o, lse = forward_reference(
        Forward.from_dict(kernel.spec.program),
        q,
        k,
        v,
        softmax_scale=scale,
        window=(window[0], window[1]),
        scalars=dict(zip(kernel.scalar_names, scalars, strict=True)),
        tensors=dict(zip(kernel.tensor_names, tensors, strict=True)),
    )
    assert lse is not None
    return o.to(q.dtype).contiguous(), lse.float().contiguous()


def reference_backward(kernel: tl_attention.Kernel) -> Any:
    """A provider: dq, dk, dv by autograd through the IR reference (what a real backward kernel computes).
    The reference reads side tensors as constants, so ALiBi's slopes get theirs from the eager formula."""

    def backward(q: Any, k: Any, v: Any, o: Any, lse: Any, grad_o: Any, **kw: Any) -> Any:
        # An op's kernel runs below the autograd dispatch key, thread-locally: autograd works in a thread.
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(grads_by_autograd, q, k, v, grad_o, **kw).result()

    def grads_by_autograd(q: Any, k: Any, v: Any, grad_o: Any, **kw: Any) -> Any:
        leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
        slopes = kw["tensors"].get("slopes")
        if slopes is not None:  # alibi.tl, in (batch, heads, seqlen, dim)
            slopes = slopes.detach().requires_grad_()
            bhsd = [t.transpose(1, 2) for t in leaves]
            out = eager_attention(*bhsd, kw["scale"], slopes=slopes).transpose(1, 2)
        else:
            out, _ = forward_reference(
                Forward.from_dict(kernel.spec.program),
                *leaves,
                softmax_scale=kw["scale"],
                window=kw["window"],
                scalars=kw["scalars"],
                tensors=kw["tensors"],
            )
        wrt = [*leaves, *([slopes] if slopes is not None else [])]
        grads = torch.autograd.grad(out, wrt, grad_o.float())
        dq, dk, dv = (g.to(q.dtype) for g in grads[:3])
        return dq, dk, dv, ({"slopes": grads[3]} if slopes is not None else {})

    return backward


@pytest.fixture
def on_cpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """CPU kernels for the ops, for this test only, and CPU tensors accepted by the call's checks."""
    monkeypatch.setattr(checks, "_DEVICES", ("cuda", "meta", "cpu"))
    with torch.library._scoped_library("tl_attention", "IMPL") as lib:
        torch.library.register_kernel("tl_attention::forward", "cpu", _reference_forward, lib=lib)
        torch.library.register_kernel("tl_attention::backward", "cpu", ops.run_backward, lib=lib)
        yield


@pytest.fixture
def provider() -> Iterator[None]:
    register_backward_provider(reference_backward)
    yield
    unregister_backward_provider(reference_backward)


def eager_attention(q: Any, k: Any, v: Any, scale: float, cap: float = 0.0, slopes: Any = None) -> Any:
    """(batch, heads, seqlen, dim) in float32; softcap when cap > 0; ALiBi (causal) with slopes."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) * scale
    if cap:
        s = cap * torch.tanh(s / cap)
    if slopes is not None:
        i = torch.arange(q.shape[2])[:, None] + k.shape[2] - q.shape[2]
        j = torch.arange(k.shape[2])[None, :]
        s = s - slopes[None, :, None, None] * (i - j).clamp(min=0)
        s = s.masked_fill(j > i, -math.inf)
    return torch.softmax(s, dim=-1) @ v


def inputs(*shapes: tuple[int, ...], seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=gen).to(BF16).requires_grad_() for s in shapes]


@pytest.mark.usefixtures("on_cpu", "provider")
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_gradients_through_the_seam(layout: str) -> None:
    kernel = tl_attention.compile("softcap.tl")
    shape_q, shape_kv = ((1, 4, 24, 128), (1, 2, 40, 128))
    if layout == "bshd":
        shape_q, shape_kv = (1, 24, 4, 128), (1, 40, 2, 128)
    q, k, v = inputs(shape_q, shape_kv, shape_kv)
    o = kernel(q, k, v, layout=layout, scale=0.2, cap=5.0)
    grad_o = torch.randn_like(o.float()).to(BF16)
    o.backward(grad_o)

    def bhsd(t: torch.Tensor) -> torch.Tensor:
        return (t if layout == "bhsd" else t.transpose(1, 2)).detach().float().requires_grad_()

    qr, kr, vr = bhsd(q), bhsd(k), bhsd(v)
    ref = eager_attention(qr, kr, vr, 0.2, cap=5.0)
    ref.backward(bhsd(grad_o))
    back = (lambda t: t) if layout == "bhsd" else (lambda t: t.transpose(1, 2))
    torch.testing.assert_close(o.float(), back(ref), atol=2e-2, rtol=2e-2)
    for got, want in ((q.grad, qr.grad), (k.grad, kr.grad), (v.grad, vr.grad)):
        assert got is not None and want is not None and got.shape == back(want).shape
        torch.testing.assert_close(got.float(), back(want), atol=3e-2, rtol=3e-2)


@pytest.mark.usefixtures("on_cpu", "provider")
def test_side_tensor_gradients_reach_their_tensor() -> None:
    """Routing: the provider's gradient of a float32 side tensor lands in that tensor's .grad."""
    kernel = tl_attention.compile("alibi.tl")
    q, k, v = inputs((1, 4, 16, 128), (1, 2, 16, 128), (1, 2, 16, 128), seed=1)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625], requires_grad=True)
    kernel(q, k, v, slopes=slopes).float().sum().backward()
    qr, kr, vr = (t.detach().float().requires_grad_() for t in (q, k, v))
    sr = slopes.detach().requires_grad_()
    eager_attention(qr, kr, vr, 128**-0.5, slopes=sr).sum().backward()
    assert slopes.grad is not None and sr.grad is not None
    torch.testing.assert_close(slopes.grad, sr.grad, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(k.grad.float(), kr.grad, atol=3e-2, rtol=3e-2)


@pytest.mark.usefixtures("on_cpu")
def test_without_a_provider_the_backward_names_what_is_missing() -> None:
    kernel = tl_attention.compile("softcap.tl")
    q, k, v = inputs((1, 4, 8, 128), (1, 4, 8, 128), (1, 4, 8, 128))
    o = kernel(q, k, v)  # the forward runs
    with pytest.raises(BackwardUnavailable, match=r"no backward for kernel softcap_fwd \(softcap\.tl\)"):
        o.float().sum().backward()
    with torch.no_grad():
        assert kernel(q, k, v).grad_fn is None


@pytest.mark.usefixtures("on_cpu", "provider")
def test_opcheck_with_real_cpu_kernels() -> None:
    kernel = tl_attention.compile("alibi.tl")
    q, k, v = (
        t.detach().transpose(1, 2).requires_grad_()
        for t in inputs((1, 4, 16, 128), (1, 2, 16, 128), (1, 2, 16, 128))
    )
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625], requires_grad=True)
    torch.library.opcheck(ops.forward_op, (kernel.key, q, k, v, 0.1, [-1, -1], [slopes], []))
