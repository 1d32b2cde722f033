"""Timing the derived backward beside SDPA's flash and cuDNN backward, same process, balanced order: the
numbers of `tl bench --backward` and of the language server's *Benchmark backward* lens."""

from __future__ import annotations

import functools
import math
from typing import Any

from runner.abi import BackwardSpec

CANDIDATES = ("tl", "sdpa-flash", "sdpa-cudnn")


def backward_tflops(
    loaded: Any, batch: int, heads: int, seqlen_q: int, seqlen_k: int, *, target_s: float = 1.0
) -> dict[str, float | None]:
    """Backward TFLOPS (counted as 2.5× the forward's FLOPs) of the loaded derived kernels ("tl") and of
    SDPA's flash and cuDNN backward where those run the same program (the plain forward, unmasked or
    causal on square shapes; None otherwise, or where a candidate failed). Inputs are random in the
    kernel's dtype; O and LSE come from the float32 forward reference."""
    import torch

    from runner.backward import backward
    from runner.bench import time_interleaved
    from runner.flops import attention_flops, tflops

    spec: BackwardSpec = loaded.spec
    b, h, sq, sk, d = batch, heads, seqlen_q, seqlen_k, spec.head_dim
    dtype = q_dtype(spec.dtype)
    q, do = (torch.randn(b, sq, h, d, device="cuda").to(dtype) for _ in range(2))
    k, v = (torch.randn(b, sk, h, d, device="cuda").to(dtype) for _ in range(2))
    scale = 1.0 / math.sqrt(d)
    causal = spec.mask == "causal"
    extras = _side(spec, b, h, sq, sk)
    o, lse = _forward_reference_outputs(spec, q, k, v, scale, extras)
    cands: dict[str, Any] = {
        "tl": functools.partial(
            _drop_index, backward, loaded, q, k, v, o, lse, do, softmax_scale=scale, extras=extras
        )
    }
    plain = spec.program is None and spec.mask in ("none", "causal")
    if plain and (not causal or sq == sk):  # SDPA's causal mask is top-left aligned: the same only if square
        cands.update(_sdpa_backward(q, k, v, do, causal, scale))
    timings = time_interleaved(cands, target_s=target_s)
    flops = 2.5 * attention_flops(b, h, sq, sk, d, mask=spec.mask if spec.mask != "window" else "none")
    out: dict[str, float | None] = {}
    for name in CANDIDATES:
        t = timings.get(name)
        out[name] = None if t is None or isinstance(t, Exception) else tflops(flops, t.median_ms / 1e3)
    return out


def _drop_index(fn: Any, *args: Any, **kw: Any) -> Any:
    """`fn(*args, **kw)` as a timing callable `run(i)` (the run index comes last and is ignored)."""
    return fn(*args[:-1], **kw)


def q_dtype(name: str) -> Any:
    from runner.launch import torch_dtype

    return torch_dtype(name)


def _side(spec: BackwardSpec, b: int, h: int, sq: int, sk: int) -> dict[str, Any]:
    if not spec.program:
        return {}
    from kernel_ir.program import Forward
    from runner.ir_reference import make_side_tensors

    return make_side_tensors(
        Forward.from_dict(spec.program), batch=b, heads=h, heads_kv=h, seqlen_q=sq, seqlen_k=sk, device="cuda"
    )


def _forward_reference_outputs(
    spec: BackwardSpec, q: Any, k: Any, v: Any, scale: float, extras: dict[str, Any]
) -> tuple[Any, Any]:
    import torch

    from kernel_ir.program import CAUSAL_MASK, PLAIN_SCORE, Forward
    from runner.ir_reference import forward_reference

    masks = (CAUSAL_MASK,) if spec.mask == "causal" else ()
    prog = (
        Forward.from_dict(spec.program)
        if spec.program
        else Forward(PLAIN_SCORE, masks, header_mask=spec.mask)
    )
    o, lse = forward_reference(prog, q, k, v, softmax_scale=scale, tensors=extras)
    return o.to(q.dtype), (lse.float().contiguous() if lse is not None else torch.zeros(1, device=q.device))


def _sdpa_backward(q: Any, k: Any, v: Any, do: Any, causal: bool, scale: float) -> dict[str, Any]:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    out: dict[str, Any] = {}
    for name, backend in (
        ("sdpa-flash", SDPBackend.FLASH_ATTENTION),
        ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION),
    ):
        leaves = [t.detach().transpose(1, 2).requires_grad_(True) for t in (q, k, v)]
        try:
            with sdpa_kernel([backend]):
                o = scaled_dot_product_attention(
                    leaves[0], leaves[1], leaves[2], is_causal=causal, scale=scale
                )
        except RuntimeError:
            continue

        def run(i: int, o: Any = o, leaves: Any = leaves) -> Any:
            return torch.autograd.grad(o, leaves, do.transpose(1, 2), retain_graph=True)

        out[name] = run
    return out
