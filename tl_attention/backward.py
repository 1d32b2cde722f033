"""The seam between the forward op and whatever computes a kernel's gradients.

A backward provider is a function `provider(kernel) -> BackwardFn | None`: given a compiled forward
(`tl_attention.Kernel`: its TL text, launch spec and name), it returns the function that computes the
gradients, or None when it has none for that kernel. Providers are asked in the order they were
registered; the first answer that is not None is used. The backward kernels' provider,
`pipeline.backward.backward_provider`, is registered on the first lookup when it exists; others come with
`register_backward_provider`.

A `BackwardFn` is called on CUDA tensors in the kernel's native layout (batch, seqlen, heads, dim) on
torch's current stream:

    fn(q, k, v, o, lse, grad_o, *, scale, window, tensors, scalars) -> (dq, dk, dv, side_grads)

`lse` is float32 (batch, heads, seqlen_q); `tensors` and `scalars` are the side tensors and runtime
scalars by TL name; dq, dk, dv have the shapes of q, k, v (GQA: dk and dv summed over each group);
`side_grads` maps the name of each float32 side tensor to its gradient (a name left out gets zeros).

Without a provider for a kernel, its backward raises `BackwardUnavailable` naming the kernel and this seam.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class BackwardUnavailable(NotImplementedError):
    """No registered backward provider handles this kernel."""


class BackwardFn(Protocol):
    def __call__(
        self,
        q: Any,
        k: Any,
        v: Any,
        o: Any,
        lse: Any,
        grad_o: Any,
        *,
        scale: float,
        window: tuple[int, int],
        tensors: dict[str, Any],
        scalars: dict[str, float],
    ) -> tuple[Any, Any, Any, dict[str, Any]]: ...


Provider = Callable[[Any], BackwardFn | None]

_PROVIDERS: list[Provider] = []


def register_backward_provider(provider: Provider) -> Provider:
    """Add a provider (usable as a decorator). Registering the same function twice keeps one entry."""
    if provider not in _PROVIDERS:
        _PROVIDERS.append(provider)
    return provider


def unregister_backward_provider(provider: Provider) -> None:
    if provider in _PROVIDERS:
        _PROVIDERS.remove(provider)


_DEFAULTS_LOADED = False


def _load_default_providers() -> None:
    """The backward kernels' own provider (`pipeline.backward.backward_provider`), when it is there; the
    layer rule keeps pipeline from importing this package, so the registration happens here."""
    global _DEFAULTS_LOADED
    if _DEFAULTS_LOADED:
        return
    _DEFAULTS_LOADED = True
    try:
        from pipeline.backward import backward_provider
    except ImportError:
        return
    register_backward_provider(backward_provider)


def find_backward(kernel: Any) -> BackwardFn | None:
    _load_default_providers()
    for provider in _PROVIDERS:
        fn = provider(kernel)
        if fn is not None:
            return fn
    return None


def require_backward(kernel: Any) -> BackwardFn:
    fn = find_backward(kernel)
    if fn is None:
        raise BackwardUnavailable(
            f"tl_attention: no backward for kernel {kernel.name} ({kernel.origin}): no registered backward "
            "provider handles it. The gradients of a TL forward come from the backward kernels "
            "(tl_attention.backward.register_backward_provider); until one covers this kernel, call it "
            "under torch.no_grad() or on inputs that do not require grad."
        )
    return fn
