"""Hugging Face transformers integration: `attn_implementation="tl"`.

`register()` adds `attention_forward` to transformers' `AttentionInterface` (the documented way to plug in
an attention function). Each call picks the kernel for its layer from what the model passes: causal or not
(`is_causal`, the module's `is_causal`), `softcap` (Gemma 2's `attn_logit_softcapping`), `sliding_window`
(the local layers of Gemma 2, Mistral, Qwen 2 with `use_sliding_window`), the head dim and the dtype; GQA
from the head counts. No mask function is registered for "tl", so transformers builds no mask tensor: the
kernel applies the causal mask and the window itself (bottom-right aligned, so a KV cache works too).

`prepare(config, dtype)` compiles the kernels of a config's layers up front and in parallel (optional: a
kernel missing at the first call compiles then; do it before capturing a CUDA graph).
"""

from __future__ import annotations

from typing import Any

import torch

from tl_attention.kernel import Kernel, current_arch, load_many
from tl_attention.model_kernels import LayerKind, kernel_for
from tl_attention.ops import forward_op, register_kernel, resolve

NAME = "tl"
_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def register(name: str = NAME) -> None:
    """Make `attn_implementation=name` run TL kernels in every transformers model with AttentionInterface."""
    from transformers import AttentionInterface

    AttentionInterface.register(name, attention_forward)


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
    softcap: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: q, k, v (batch, heads, seqlen, dim) in; the output
    (batch, seqlen, heads, dim) and no attention weights out."""
    if attention_mask is not None:
        raise ValueError(
            "attention_mask: the tl attention applies the model's causal and sliding-window masks itself and "
            "takes no mask tensor (padding masks are not supported: pass unpadded batches)"
        )
    if kwargs.get("cu_seq_lens_q") is not None or kwargs.get("cu_seq_lens_k") is not None:
        raise ValueError("cu_seq_lens_q/k: the tl attention takes no packed (varlen) sequences")
    if dropout and module.training:
        raise ValueError(f"dropout: the tl kernels have no attention dropout, got p={dropout} in training")
    dtype = _DTYPES.get(query.dtype)
    if dtype is None:
        raise TypeError(
            f"query: dtype {query.dtype}; the tl kernels run in bfloat16 or float16 (load the model with "
            "dtype=torch.bfloat16)"
        )
    if query.shape[-1] != value.shape[-1]:
        raise ValueError(f"value: head dim {value.shape[-1]} differs from the query's {query.shape[-1]}")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    kind = LayerKind(dtype, query.shape[-1], bool(causal), softcap is not None, sliding_window is not None)
    scalars = ([float(softcap)] if softcap is not None else []) + (
        [float(sliding_window)] if sliding_window is not None else []
    )
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    o, _ = forward_op(kind.key, q, k, v, float(scale), [-1, -1], [], scalars)
    return o, None


def layer_kinds(config: Any, dtype: torch.dtype) -> list[LayerKind]:
    """The distinct attention layers of a transformers config."""
    text = getattr(config, "get_text_config", lambda: config)()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    softcap = getattr(text, "attn_logit_softcapping", None) is not None
    layer_types = getattr(text, "layer_types", None) or ["full_attention"]
    windows = {
        t == "sliding_attention" and getattr(text, "sliding_window", None) is not None for t in layer_types
    }
    return [LayerKind(_DTYPES[dtype], head_dim, True, softcap, w) for w in sorted(windows)]


def kernels_for(config: Any, dtype: torch.dtype = torch.bfloat16) -> list[Kernel]:
    """The kernels of `config`'s layers, translated and registered (not compiled)."""
    return [resolve(register_kernel(kernel_for(kind))) for kind in layer_kinds(config, dtype)]


def prepare(config: Any, dtype: torch.dtype = torch.bfloat16) -> list[Kernel]:
    """`kernels_for`, and with a device also compiled (in parallel, through the disk cache) and loaded on
    the current one."""
    kernels = kernels_for(config, dtype)
    if current_arch() is not None:
        load_many(kernels)
    return kernels
