"""The reference of an inference kernel: each sequence's K and V gathered into contiguous tensors (from
its pages, or its slice of a packed batch) and evaluated by `runner.ir_reference.forward_reference`
from the same kernel IR program, one sequence at a time (its own seqlen_q and seqlen_k, so the masks,
causal included, apply per sequence exactly as in the kernel).

Side tensors are sliced per sequence: a `batch` dim to the sequence's entry, `seqlen_q` / `seqlen_k`
dims to its lengths (the kernel indexes them by the sequence's own q_idx / kv_idx).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from kernel_ir.program import Forward
from runner.ir_reference import forward_reference


def gather_pages(cache: torch.Tensor, block_table: torch.Tensor, b: int, length: int) -> torch.Tensor:
    """Sequence b's first `length` tokens of a paged cache (pages, page_size, heads_kv, d), contiguous:
    (length, heads_kv, d)."""
    page = cache.shape[1]
    pages = block_table[b, : math.ceil(length / page)].long()
    return cache[pages].reshape(-1, *cache.shape[2:])[:length]


def _slice_tensors(
    program: Forward, tensors: dict[str, torch.Tensor], b: int, sq: int, sk: int
) -> dict[str, torch.Tensor]:
    out = {}
    for t in program.tensors:
        x = tensors[t.name]
        index: list[Any] = []
        for d in t.dims:
            index.append({"batch": slice(b, b + 1), "seqlen_q": slice(0, sq), "seqlen_k": slice(0, sk)}.get(
                d if isinstance(d, str) else "", slice(None)))  # fmt: skip
        out[t.name] = x[tuple(index)].contiguous()
    return out


def inference_reference(
    program: Forward,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    block_table: torch.Tensor | None = None,
    cache_seqlens: torch.Tensor | None = None,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_k: torch.Tensor | None = None,
    softmax_scale: float | None = None,
    window: tuple[int, int] = (-1, -1),
    scalars: dict[str, float | int] | None = None,
    tensors: dict[str, torch.Tensor] | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(O, LSE) in the layouts `runner.decode.decode_attention` returns, in `dtype`."""
    varlen = cu_seqlens_q is not None
    if varlen:
        assert cu_seqlens_k is not None
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        batch = len(cq) - 1
    else:
        batch = q.shape[0]
    lens = cache_seqlens.tolist() if cache_seqlens is not None else None
    heads, d_v = q.shape[-2], v.shape[-1]
    o = torch.zeros(*q.shape[:-1], d_v, dtype=dtype, device=q.device)
    lse = (
        torch.full((heads, q.shape[0]) if varlen else (batch, heads, q.shape[1]), math.inf, dtype=dtype,
                   device=q.device)
        if program.normalizer == "softmax" else None
    )  # fmt: skip
    for b in range(batch):
        if varlen:
            qb = q[cq[b] : cq[b + 1]]
            kb, vb = k[ck[b] : ck[b + 1]], v[ck[b] : ck[b + 1]]
        else:
            qb = q[b]
            sk = lens[b] if lens is not None else k.shape[1]
            if block_table is not None:
                kb, vb = gather_pages(k, block_table, b, sk), gather_pages(v, block_table, b, sk)
            else:
                kb, vb = k[b, :sk], v[b, :sk]
        sq, sk = qb.shape[0], kb.shape[0]
        if sq == 0:
            continue
        side = _slice_tensors(program, tensors or {}, b, sq, sk)
        ob, lb = forward_reference(
            program, qb[None], kb[None], vb[None], softmax_scale=softmax_scale, window=window,
            scalars=scalars, tensors=side, dtype=dtype,
        )  # fmt: skip
        if varlen:
            o[cq[b] : cq[b + 1]] = ob[0]
            if lse is not None and lb is not None:
                lse[:, cq[b] : cq[b + 1]] = lb[0]
        else:
            o[b] = ob[0]
            if lse is not None and lb is not None:
                lse[b] = lb[0]
    return o, lse
