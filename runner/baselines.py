"""Baselines timed beside our kernels, in the same process on the same inputs.

- `sdpa-flash`: PyTorch SDPA forced to FLASH_ATTENTION (FlashAttention 2 inside PyTorch);
- `sdpa-cudnn`: SDPA forced to CUDNN_ATTENTION; `sdpa-efficient`: EFFICIENT_ATTENTION (xformers' kernel);
- `flex`: `torch.compile(flex_attention)` with a block mask for causal;
- `fa4`: `flash_attn.cute.flash_attn_func` (FlashAttention 4, CuTe DSL) when it is importable.

Each `prepare(...)` returns a `run(i)` callable, or raises when the baseline cannot run the configuration;
`runner.bench.bench_callable` records that as n/a. Inputs come in the (batch, seqlen, heads, dim) layout;
SDPA and Flex take (batch, heads, seqlen, dim) views of them (no copy), as FlashAttention's own layout is
the former and SDPA passes the strides through.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runner.bench import Inputs

Run = Callable[[int], Any]


@dataclass(frozen=True)
class Baseline:
    name: str
    prepare: Callable[[Inputs, str, float], Run]  # (inputs, mask, softmax_scale) → run(i)


def _sdpa(backend_name: str) -> Callable[[Inputs, str, float], Run]:
    def prepare(inputs: Inputs, mask: str, scale: float) -> Run:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention

        if mask not in ("none", "causal"):
            raise NotImplementedError(f"SDPA has no {mask} mask")
        backend = getattr(SDPBackend, backend_name)
        q0, k0, _, _, _ = inputs[0]
        gqa = q0.shape[2] != k0.shape[2]
        if q0.shape[1] != k0.shape[1] and mask == "causal":
            raise NotImplementedError("SDPA's is_causal is top-left aligned; ours is bottom-right")

        def run(i: int) -> Any:
            q, k, v, _, _ = inputs[i]
            with sdpa_kernel([backend]):
                return scaled_dot_product_attention(
                    q.transpose(1, 2),
                    k.transpose(1, 2),
                    v.transpose(1, 2),
                    is_causal=mask == "causal",
                    scale=scale,
                    enable_gqa=gqa,
                )

        run(0)  # raises here, once, when the backend rejects the configuration
        torch.cuda.synchronize()
        return run

    return prepare


def _flex(inputs: Inputs, mask: str, scale: float) -> Run:
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if mask not in ("none", "causal"):
        raise NotImplementedError(f"no {mask} mask for flex here")
    q0, k0, _, _, _ = inputs[0]
    sq, sk = q0.shape[1], k0.shape[1]
    block_mask = None
    if mask == "causal":
        offset = sk - sq

        def causal(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            return kv_idx <= q_idx + offset

        block_mask = create_block_mask(causal, B=None, H=None, Q_LEN=sq, KV_LEN=sk, device=q0.device)
    # Every benchmark shape is a recompile of the same function; lift dynamo's per-function limit (8) so
    # later shapes are not silently run uncompiled.
    for knob in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, max(64, getattr(torch._dynamo.config, knob)))
    compiled = torch.compile(flex_attention, dynamic=False)
    gqa = q0.shape[2] != k0.shape[2]

    def run(i: int) -> Any:
        q, k, v, _, _ = inputs[i]
        return compiled(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            block_mask=block_mask,
            scale=scale,
            enable_gqa=gqa,
        )

    run(0)
    torch.cuda.synchronize()
    return run


def _fa4(inputs: Inputs, mask: str, scale: float) -> Run:
    import torch
    from flash_attn.cute import flash_attn_func

    if mask not in ("none", "causal"):
        raise NotImplementedError(f"no {mask} mask for fa4 here")

    def run(i: int) -> Any:
        q, k, v, _, _ = inputs[i]
        return flash_attn_func(q, k, v, softmax_scale=scale, causal=mask == "causal")

    run(0)
    torch.cuda.synchronize()
    return run


BASELINES: tuple[Baseline, ...] = (
    Baseline("sdpa-flash", _sdpa("FLASH_ATTENTION")),
    Baseline("sdpa-cudnn", _sdpa("CUDNN_ATTENTION")),
    Baseline("sdpa-efficient", _sdpa("EFFICIENT_ATTENTION")),
    Baseline("flex", _flex),
    Baseline("fa4", _fa4),
)


def default_scale(head_dim_qk: int) -> float:
    return 1.0 / math.sqrt(head_dim_qk)
