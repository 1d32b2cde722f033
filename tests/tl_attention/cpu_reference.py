"""CPU stand-ins for the tl_attention ops' CUDA kernels, and an eager attention to compare against.

`reference_forward` is the reference the GPU verification uses (the kernel IR's evaluation,
`runner.ir_reference`, or `runner.reference` for a plain forward); `reference_backward` is a backward
provider computing gradients by autograd through the same reference. Only the arithmetic differs from the
CUDA path: the op, its fake kernel, its autograd formula, the layouts and the kernel chosen for a model
layer are the real ones.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

import tl_attention
from kernel_ir.program import Forward
from runner.ir_reference import forward_reference
from runner.reference import attention_reference
from tl_attention import ops


def reference_forward(
    key: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    window: list[int],
    tensors: list[torch.Tensor],
    scalars: list[float],
    classes: torch.Tensor | None = None,
    classes_bwd: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    kernel = ops.resolve(key)
    if kernel.spec.program is None:
        mask = kernel.spec.mask
        o, lse = attention_reference(q, k, v, mask=mask, window=(window[0], window[1]), softmax_scale=scale)
        return o.to(q.dtype).contiguous(), lse.contiguous()
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
        elif kernel.spec.program is None:  # a plain forward
            mask, window = kernel.spec.mask, kw["window"]
            out, _ = attention_reference(*leaves, mask=mask, window=window, softmax_scale=kw["scale"])
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
