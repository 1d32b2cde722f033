"""FLOP counts by the FlashAttention convention: the one place benchmark numbers get their denominators.

Two GEMMs per (query, key) pair: S = Q·Kᵀ costs 2·d_qk and O += P·V costs 2·d_v, so a pair costs
2·(d_qk + d_v) FLOPs; with d_qk = d_v = d that is FlashAttention's 4·B·H·Sq·Sk·d. The softmax is not counted.

Causal with seqlen_q == seqlen_k: exactly half, as FlashAttention's benchmarks count (4·B·H·S²·d / 2), so
our TFLOPS compare with published ones. (The pairs really computed are S·(S+1)/2, 0.1% more at S = 512.)
Causal with seqlen_q != seqlen_k (bottom-right aligned) and windows: the exact number of pairs the mask lets
through, since "half" means nothing there.
"""

from __future__ import annotations


def visible_pairs(
    seqlen_q: int, seqlen_k: int, mask: str = "none", window: tuple[int, int] = (-1, -1)
) -> int:
    """Number of (query row, key) pairs the mask lets through, bottom-right aligned."""
    if mask == "none":
        return seqlen_q * seqlen_k
    offset = seqlen_k - seqlen_q
    if mask == "causal":
        left, right = -1, 0
    elif mask == "window":
        left, right = window
    else:
        raise ValueError(f"unknown mask {mask!r}")
    total = 0
    # Per row i the visible keys form one interval [lo, hi] ∩ [0, seqlen_k - 1]; sum its lengths.
    # O(seqlen_q) is fine for the benchmark's lengths (≤ 16k rows).
    for i in range(seqlen_q):
        diag = i + offset
        lo = 0 if left < 0 else max(0, diag - left)
        hi = seqlen_k - 1 if right < 0 else min(seqlen_k - 1, diag + right)
        if hi >= lo:
            total += hi - lo + 1
    return total


def attention_flops(
    batch: int,
    heads: int,
    seqlen_q: int,
    seqlen_k: int,
    head_dim_qk: int,
    head_dim_v: int | None = None,
    *,
    mask: str = "none",
    window: tuple[int, int] = (-1, -1),
) -> float:
    """Forward-pass FLOPs: 2·B·H·(d_qk + d_v)·(counted pairs)."""
    d_v = head_dim_qk if head_dim_v is None else head_dim_v
    if mask == "causal" and seqlen_q == seqlen_k:
        pairs: float = seqlen_q * seqlen_k / 2  # exactly half, also for odd S
    else:
        pairs = visible_pairs(seqlen_q, seqlen_k, mask, window)
    return 2.0 * batch * heads * (head_dim_qk + d_v) * pairs


def tflops(flops: float, seconds: float) -> float:
    return flops / seconds / 1e12 if seconds > 0 else float("nan")
