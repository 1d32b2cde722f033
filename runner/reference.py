"""The float32 PyTorch reference every kernel is verified against.

Semantics (the kernel ABI's, FlashAttention 2's):
- tensors (batch, seqlen, heads, dim); key/value head of query head h is h // (heads // heads_kv) (GQA/MQA);
- causal and window masks align to the bottom-right corner: with `diag = i + seqlen_k - seqlen_q`, query
  row i sees key j iff j <= diag (causal), or diag - left <= j <= diag + right (window; -1 = unbounded);
- a row that sees no key gets O = 0 and LSE = +inf;
- LSE is the natural-log log-sum-exp of the scaled scores, float32 (batch, heads, seqlen_q).

Computed in float32 (on the inputs' device) in chunks of query rows, so 16k × 16k scores never materialise.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def allowed_mask(
    seqlen_q: int,
    seqlen_k: int,
    mask: str,
    window: tuple[int, int] = (-1, -1),
    *,
    row_start: int = 0,
    rows: int | None = None,
    device: Any = None,
) -> torch.Tensor | None:
    """Bool (rows, seqlen_k): True where query row i may see key j. None when everything is visible."""
    if mask == "none":
        return None
    if mask not in ("causal", "window"):
        raise ValueError(f"unknown mask {mask!r} (expected none, causal or window)")
    rows = seqlen_q - row_start if rows is None else rows
    i = torch.arange(row_start, row_start + rows, device=device).unsqueeze(1)
    j = torch.arange(seqlen_k, device=device).unsqueeze(0)
    diag = i + (seqlen_k - seqlen_q)
    if mask == "causal":
        return j <= diag
    left, right = window
    ok = torch.ones(rows, seqlen_k, dtype=torch.bool, device=device)
    if left >= 0:
        ok &= j >= diag - left
    if right >= 0:
        ok &= j <= diag + right
    return ok


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: str = "none",
    window: tuple[int, int] = (-1, -1),
    softmax_scale: float | None = None,
    chunk: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(O float32 (batch, seqlen_q, heads, d_v), LSE float32 (batch, heads, seqlen_q))."""
    batch, seqlen_q, heads, d_qk = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    if heads % heads_kv:
        raise ValueError(f"heads ({heads}) must be a multiple of heads_kv ({heads_kv})")
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d_qk)
    group = heads // heads_kv
    # (batch, heads, seqlen, dim) float32; repeat K/V heads for GQA.
    qf = q.float().transpose(1, 2)
    kf = k.float().transpose(1, 2).repeat_interleave(group, dim=1)
    vf = v.float().transpose(1, 2).repeat_interleave(group, dim=1)
    d_v = v.shape[3]
    out = torch.zeros(batch, heads, seqlen_q, d_v, dtype=torch.float32, device=q.device)
    lse = torch.full((batch, heads, seqlen_q), math.inf, dtype=torch.float32, device=q.device)
    for start in range(0, seqlen_q, chunk):
        rows = min(chunk, seqlen_q - start)
        s = torch.matmul(qf[:, :, start : start + rows], kf.transpose(-1, -2)) * scale
        allowed = allowed_mask(seqlen_q, seqlen_k, mask, window, row_start=start, rows=rows, device=q.device)
        if allowed is not None:
            s = s.masked_fill(~allowed, -math.inf)
        row_lse = torch.logsumexp(s, dim=-1)  # -inf for rows with no visible key
        empty = torch.isneginf(row_lse)
        p = torch.exp(s - row_lse.masked_fill(empty, 0.0).unsqueeze(-1))
        p = p.masked_fill(empty.unsqueeze(-1), 0.0)
        out[:, :, start : start + rows] = torch.matmul(p, vf)
        lse[:, :, start : start + rows] = row_lse.masked_fill(empty, math.inf)
    return out.transpose(1, 2), lse
