"""Argument checks of an inference kernel's call (split-KV decode, paged KV, packed batches), before
anything reaches the op or a GPU.

Like `tl_attention.checks`: `TypeError` for a wrong kind of value, `ValueError` for a wrong value, each
naming the argument. They read only shapes, strides, dtypes and devices (never tensor values, which
would synchronise), so they run on real, fake and meta tensors alike.

Layouts (FlashAttention's `flash_attn_with_kvcache` / `flash_attn_varlen_func`):
- decode, contiguous cache: q (batch, seqlen_q, heads, d), k / v (batch, seqlen_k, heads_kv, d),
  cache_seqlens (batch,) int32 optional;
- decode, paged cache: k / v (pages, page_size, heads_kv, d), block_table (batch, max_pages) int32,
  cache_seqlens (batch,) int32;
- packed batch (varlen): q (total_q, heads, d), k / v (total_k, heads_kv, d), cu_seqlens_q / _k
  (batch + 1,) int32, max_seqlen_q / _k ints.
"""

from __future__ import annotations

from typing import Any

from runner.abi import LaunchSpec
from tl_attention import checks
from tl_attention.checks import Shapes, kernel_dtype

MAX_SPLITS = 128  # runner.decode.MAX_SPLITS: the combine kernel's limit


def kind(spec: LaunchSpec) -> str:
    """'paged', 'contiguous' or 'varlen'."""
    inf = spec.inference or {}
    return "varlen" if inf.get("varlen") else "paged" if inf.get("page_size") else "contiguous"


def check_call(
    spec: LaunchSpec,
    q: Any,
    k: Any,
    v: Any,
    *,
    block_table: Any,
    cache_seqlens: Any,
    cu_seqlens_q: Any,
    cu_seqlens_k: Any,
    max_seqlen_q: Any,
    max_seqlen_k: Any,
    num_splits: Any,
) -> Shapes:
    """The call's sizes (seqlen_q / seqlen_k: the maxima), or the error naming what is wrong."""
    import torch

    mode = kind(spec)
    rank = 3 if mode == "varlen" else 4
    layout = {
        "varlen": ("(total_q, heads, d)", "(total_k, heads_kv, d)"),
        "paged": ("(batch, seqlen_q, heads, d)", "(pages, page_size, heads_kv, d)"),
        "contiguous": ("(batch, seqlen_q, heads, d)", "(batch, seqlen_k, heads_kv, d)"),
    }[mode]
    want = kernel_dtype(spec)
    for name, t, dims in (("q", q, layout[0]), ("k", k, layout[1]), ("v", v, layout[1])):
        _tensor(name, t, q)
        if t.dim() != rank:
            raise ValueError(f"{name}: expected {rank} dims {dims} for a {mode} kernel, got {tuple(t.shape)}")
        if t.dtype != want:
            raise TypeError(f"{name}: dtype {t.dtype}, but {spec.kernel_name} was built for {want}")
        if t.stride(-1) != 1:
            raise ValueError(f"{name}: the last dim must be contiguous (stride 1), got strides {t.stride()}")
    for name, t, d in (("q", q, spec.head_dim_qk), ("k", k, spec.head_dim_qk), ("v", v, spec.head_dim_v)):
        if t.shape[-1] != d:
            raise ValueError(f"{name}: head dim {t.shape[-1]}, but {spec.kernel_name} was built for {d}")
    if tuple(k.shape[:-1]) != tuple(v.shape[:-1]):
        raise ValueError(f"k, v: shapes {tuple(k.shape)} and {tuple(v.shape)} differ before the head dim")
    heads, heads_kv = q.shape[-2], k.shape[-2]
    if heads_kv == 0 or heads % heads_kv:
        raise ValueError(f"k: {heads_kv} key/value head(s) do not divide q's {heads} heads")
    if spec.heads_kv and heads_kv != spec.heads_kv:
        raise ValueError(
            f"k: {heads_kv} key/value head(s), but {spec.kernel_name} was built for {spec.heads_kv}"
        )
    if spec.group and heads // heads_kv != spec.group:
        raise ValueError(
            f"q, k: GQA group {heads}/{heads_kv}, but {spec.kernel_name} was built for {spec.group}"
        )
    given = {
        "block_table": block_table, "cache_seqlens": cache_seqlens, "cu_seqlens_q": cu_seqlens_q,
        "cu_seqlens_k": cu_seqlens_k, "max_seqlen_q": max_seqlen_q, "max_seqlen_k": max_seqlen_k,
    }  # fmt: skip
    takes = {
        "varlen": ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"),
        "paged": ("block_table", "cache_seqlens"),
        "contiguous": ("cache_seqlens",),
    }[mode]
    for name, value in given.items():
        if value is not None and name not in takes:
            raise TypeError(f"{name}: {spec.kernel_name} is a {mode} kernel; it takes {', '.join(takes)}")
    if mode == "varlen":
        for name in takes:
            if given[name] is None:
                raise TypeError(f"{name}: a packed-batch kernel needs {', '.join(takes)}")
        batch = cu_seqlens_q.shape[0] - 1 if isinstance(cu_seqlens_q, torch.Tensor) else -1
        _index("cu_seqlens_q", cu_seqlens_q, q, (batch + 1,))
        _index("cu_seqlens_k", cu_seqlens_k, q, (batch + 1,))
        if batch < 0:
            raise ValueError("cu_seqlens_q: expected batch + 1 >= 1 offsets, got none")
        seqlen_q, seqlen_k = _length("max_seqlen_q", max_seqlen_q), _length("max_seqlen_k", max_seqlen_k)
    elif mode == "paged":
        batch, seqlen_q = q.shape[0], q.shape[1]
        page = int((spec.inference or {})["page_size"])
        if k.shape[1] != page:
            raise ValueError(f"k: pages of {k.shape[1]} tokens, but {spec.kernel_name} was built for {page}")
        for name in takes:
            if given[name] is None:
                raise TypeError(f"{name}: a paged-cache kernel needs block_table and cache_seqlens")
        _index("block_table", block_table, q, (batch, None))
        _index("cache_seqlens", cache_seqlens, q, (batch,))
        seqlen_k = block_table.shape[1] * page
    else:
        batch, seqlen_q, seqlen_k = q.shape[0], q.shape[1], k.shape[1]
        if k.shape[0] != batch:
            raise ValueError(f"k: batch {k.shape[0]}, but q has {batch}")
        if cache_seqlens is not None:
            _index("cache_seqlens", cache_seqlens, q, (batch,))
    if num_splits is not None:
        if isinstance(num_splits, bool) or not isinstance(num_splits, int):
            raise TypeError(f"num_splits: expected an int or None, got {type(num_splits).__name__}")
        top = MAX_SPLITS if spec.combine_name else 1
        if not 1 <= num_splits <= top:
            raise ValueError(f"num_splits: {spec.kernel_name} takes 1 to {top}, got {num_splits}")
    return Shapes(batch, seqlen_q, seqlen_k, heads, heads_kv)


def _tensor(name: str, t: Any, q: Any) -> None:
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type not in checks._DEVICES:
        raise ValueError(f"{name}: tensor is on {t.device}, expected a CUDA tensor")
    if t.device != q.device:
        raise ValueError(f"{name}: tensor is on {t.device}, but q is on {q.device}")


def _index(name: str, t: Any, q: Any, shape: tuple[int | None, ...]) -> None:
    """An int32 index tensor of `shape` (None: any size) with a contiguous last dim."""
    import torch

    _tensor(name, t, q)
    if t.dtype != torch.int32:
        raise TypeError(f"{name}: dtype {t.dtype}, expected torch.int32")
    if t.dim() != len(shape) or any(w is not None and w != n for w, n in zip(shape, t.shape, strict=True)):
        want = ", ".join("any" if w is None else str(w) for w in shape)
        raise ValueError(
            f"{name}: expected shape ({want}{',' if len(shape) == 1 else ''}), got {tuple(t.shape)}"
        )
    if t.stride(-1) != 1:
        raise ValueError(f"{name}: the last dim must be contiguous, got strides {t.stride()}")


def _length(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int (the longest sequence), got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name}: expected a length >= 0, got {value}")
    return value
