"""The inference Params: how a TL file asks for split-KV decode, a paged KV cache and a packed batch.

They are ordinary `Param` lines whose names the toolchain knows (hover, the checker and the planner read
this table), so a decode kernel is the forward program of the same TL statements with a few more Params:

    Param splits = 0       split-KV: the key range over this many thread blocks, merged by LSE; 0: the
                           launch picks the count from the SM count, batch, heads and length
    Param page_size = 64   paged KV: K and V read through a block table of 64-token pages
    Param pack_gqa = 1     the query heads that share a K/V head are rows of one tile
    Param varlen = 1       a packed batch: cu_seqlens_q / cu_seqlens_k, per-sequence lengths

Any of them makes the kernel an *inference* kernel (`translator/backends/inference.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tl_language.model import Model

PAGE_SIZES = (16, 32, 64, 128, 256)
MAX_SPLITS = 128  # the combine kernel merges at most this many partial results per row
FLAGS = ("pack_gqa", "varlen")
NAMES = ("splits", "page_size", *FLAGS)

PARAM_DOCS: dict[str, str] = {
    "splits": (
        "split-KV decode: the key range of each (batch, K/V head) is split over this many thread blocks, "
        "each writing a partial O and its LSE in fp32, and a combine kernel merges them by LSE. 0: the "
        f"launch picks the count from the SM count, batch, heads and cache length (at most {MAX_SPLITS})"
    ),
    "page_size": (
        "paged KV cache: K and V are (pages, page_size, heads_kv, d) and each sequence reads its keys "
        "through a block table (batch, max pages) of page indices, with per-sequence cache lengths; "
        f"one of {', '.join(map(str, PAGE_SIZES))} tokens. Absent or 0: contiguous K and V"
    ),
    "pack_gqa": (
        "0 or 1: the query heads that share a K/V head become rows of one query tile (row = query row · "
        "group + head in group), so one K/V read serves the whole group (default 1 in inference kernels)"
    ),
    "varlen": (
        "0 or 1: a packed batch. Q, K and V are (total tokens, heads, d); sequence b owns rows "
        "cu_seqlens_q[b] … cu_seqlens_q[b + 1] of Q and cu_seqlens_k[b] … of K and V, and every mask "
        "(causal too) applies per sequence"
    ),
}


@dataclass(frozen=True, slots=True)
class Inference:
    """What a TL file's inference Params ask for (their values; None when the file is no inference
    kernel)."""

    splits: int  # 0: automatic at launch; 1: one block per (batch, head) tile
    page_size: int  # 0: contiguous K/V
    pack_gqa: bool
    varlen: bool

    @property
    def packed_prefill(self) -> bool:
        """A packed batch with one block per query tile and contiguous K/V: prefill, bound by the tensor
        cores rather than by memory, so sm_90 builds it on the wgmma skeleton."""
        return self.varlen and self.splits == 1 and not self.page_size and not self.pack_gqa


def inference_of(model: Model) -> Inference | None:
    """The file's inference settings, or None when it sets none of the inference Params (a holed or
    inexact value counts as absent here; TL307 reports it)."""
    present = {n: p.value for n in NAMES if (p := model.params.get(n)) is not None}
    if not present:
        return None
    split = "splits" in present
    return Inference(
        splits=present.get("splits") or 0 if split else 1,
        page_size=present.get("page_size") or 0,
        pack_gqa=bool(present.get("pack_gqa", 1)),
        varlen=bool(present.get("varlen", 0)),
    )
