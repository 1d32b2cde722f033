"""The torch ops: `tl_attention::forward` and `tl_attention::backward`, their fake kernels and autograd.

Both take the kernel by a registry key (a string, so the op schema stays plain and `torch.compile` bakes
the kernel into the graph as a constant), the tensors in the kernel's native layout (batch, seqlen, heads,
dim), and the kernel's side tensors and runtime scalars as two lists in the kernel's parameter order
(int32 Scalars travel as floats: a double holds every int32 exactly).

The real kernels are registered for CUDA only; on meta and fake tensors the fake kernels answer with the
output shapes, so tracing, `torch.compile` and `opcheck` run without a GPU. The forward launches on torch's
current stream and allocates only through torch's allocator, so it can be captured in a CUDA graph.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from tl_attention.backward import require_backward

if TYPE_CHECKING:
    from tl_attention.kernel import Kernel

_KERNELS: dict[str, Kernel] = {}
# Key prefix → builder: kernels made on demand from their key (the transformers integration's per-config
# kernels, whose key is all the Python side of a traced model computes).
_FACTORIES: dict[str, Callable[[str], Kernel]] = {}
_LOCK = threading.Lock()


def register_kernel(kernel: Kernel) -> str:
    with _LOCK:
        _KERNELS.setdefault(kernel.key, kernel)
    return kernel.key


def register_factory(prefix: str, build: Callable[[str], Kernel]) -> None:
    _FACTORIES[prefix] = build


def resolve(key: str) -> Kernel:
    """The kernel behind `key`; a factory key builds its kernel on first use."""
    kernel = _KERNELS.get(key)
    if kernel is not None:
        return kernel
    prefix = key.split(":", 1)[0]
    build = _FACTORIES.get(prefix)
    if build is None:
        raise KeyError(
            f"tl_attention: no kernel is registered under {key!r} (compile it with tl_attention.compile)"
        )
    with _LOCK:
        if key not in _KERNELS:
            _KERNELS[key] = build(key)
        return _KERNELS[key]


@torch.library.custom_op("tl_attention::forward", mutates_args=(), device_types="cuda")
def forward_op(
    key: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float,
    window: list[int],
    tensors: list[Tensor],
    scalars: list[float],
    classes: Tensor | None = None,
    classes_bwd: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """o (batch, seqlen_q, heads, d_v) in q's dtype and lse float32 (batch, heads, seqlen_q). `classes`:
    prebuilt block classes of the forward (`Kernel.block_mask`), `classes_bwd` the backward's, kept for
    it; None: each kernel classifies the blocks itself (programs whose masks read side tensors)."""
    return resolve(key).launch(q, k, v, scale, window, tensors, scalars, classes)


@forward_op.register_fake
def _forward_fake(
    key: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    scale: float,
    window: list[int],
    tensors: list[Tensor],
    scalars: list[float],
    classes: Tensor | None = None,
    classes_bwd: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    batch, seqlen_q, heads, _ = q.shape
    o = q.new_empty(batch, seqlen_q, heads, v.shape[3])
    lse = q.new_empty(batch, heads, seqlen_q, dtype=torch.float32)
    return o, lse


def run_backward(
    key: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    grad_o: Tensor,
    scale: float,
    window: list[int],
    tensors: list[Tensor],
    scalars: list[float],
    classes: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:
    """(dq, dk, dv, gradients of the float32 side tensors in order) from the kernel's backward provider,
    with the strides the fake kernel promises: the body of `tl_attention::backward`. `classes`: the
    backward's prebuilt block classes (passed to the provider only when given)."""
    kernel = resolve(key)
    fn = require_backward(kernel)
    names = kernel.tensor_names
    dq, dk, dv, side = fn(
        q,
        k,
        v,
        o,
        lse,
        grad_o,
        scale=scale,
        window=(window[0], window[1]),
        tensors=dict(zip(names, tensors, strict=True)),
        scalars=dict(zip(kernel.scalar_names, scalars, strict=True)),
        **({"block_classes": classes} if classes is not None else {}),
    )
    grads = [
        _like(side[name], t) if name in side else torch.zeros_like(t)
        for name, t in zip(names, tensors, strict=True)
        if t.dtype == torch.float32
    ]
    return _like(dq, q), _like(dk, k), _like(dv, v), grads


def _like(grad: Tensor, t: Tensor) -> Tensor:
    """`grad` with `t`'s strides (what the fake kernel promises), copied only when they differ."""
    if grad.stride() == t.stride() and grad.dtype == t.dtype:
        return grad
    out = torch.empty_like(t)
    out.copy_(grad)
    return out


backward_op = torch.library.custom_op("tl_attention::backward", mutates_args=(), device_types="cuda")(
    run_backward
)


@backward_op.register_fake
def _backward_fake(
    key: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    grad_o: Tensor,
    scale: float,
    window: list[int],
    tensors: list[Tensor],
    scalars: list[float],
    classes: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, list[Tensor]]:
    grads = [torch.empty_like(t) for t in tensors if t.dtype == torch.float32]
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), grads


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    key, q, k, v, scale, window, tensors, scalars, _classes, classes_bwd = inputs  # defaults filled in
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, *tensors, *([classes_bwd] if classes_bwd is not None else []))
    ctx.key, ctx.scale, ctx.window, ctx.scalars = key, scale, list(window), list(scalars)
    ctx.side_tensors = len(tensors)
    ctx.mark_non_differentiable(lse)


def _backward(ctx: Any, grad_o: Tensor, _grad_lse: Tensor | None) -> tuple[Any, ...]:
    q, k, v, o, lse, *rest = ctx.saved_tensors
    tensors, classes = rest[: ctx.side_tensors], rest[ctx.side_tensors :]
    dq, dk, dv, grads = backward_op(
        ctx.key, q, k, v, o, lse, grad_o.contiguous(), ctx.scale, ctx.window, tensors, ctx.scalars,
        classes[0] if classes else None,
    )  # fmt: skip
    it = iter(grads)
    side = [next(it) if t.dtype == torch.float32 else None for t in tensors]
    # torch's pytree reads an empty list as a list of (optional) tensors, whose gradient is a list too.
    no_grad_scalars = [] if not ctx.scalars else None
    grads_in = (None, dq, dk, dv, None, None, side, no_grad_scalars, None, None)  # nothing for the classes
    # one per argument the call passed: torch leaves defaulted trailing arguments out of the structure
    return grads_in[: len(ctx.needs_input_grad)]


torch.library.register_autograd("tl_attention::forward", _backward, setup_context=_setup_context)
