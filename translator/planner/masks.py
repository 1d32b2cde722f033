"""What a program's masks do to a tiling's work, for the cost model: per query tile, how many key blocks the
kernel computes and how many of those it masks per score, from the same interval classification the
kernels run (`kernel_ir.passes.block_class`), with the Scalars at their defaults; and the (query, key)
pairs the masks keep, which does not depend on the tiling.

A mask that reads a side tensor (document ids, flags) is unknown here: its blocks count as computed and
masked, as a kernel without its launch-time classification would run them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from kernel_ir import passes
from kernel_ir.expr import Expr
from kernel_ir.program import Forward
from tl_language.model import Model
from translator.errors import TranslateError

# The kept-pairs estimate classifies a grid of at most PAIRS_CELLS × PAIRS_CELLS rectangles (64 × 64 keys
# and queries or larger): whole when the classification keeps a rectangle, half when it cannot tell.
PAIRS_CELLS = 64
# Query tiles sampled (evenly) for the mean key blocks of a tile: the planner ranks a few dozen tilings
# on every completion request, so each costs a few thousand block tests at most.
SAMPLED_TILES = 16


@dataclass(frozen=True, slots=True)
class Masks:
    exprs: tuple[Expr, ...]
    scalars: tuple[tuple[str, int | float], ...]  # the Scalars' defaults


@dataclass(frozen=True, slots=True)
class Blocks:
    computed: float  # key blocks a query tile runs, averaged over the tiles
    masked: float  # of which the classification could not prove whole (masked per score)


def lowered(model: Model) -> Forward | None:
    """`model`'s kernel IR as the translator lowers it (`Param fast_tanh` included), or None where the
    program does not lower yet: a half-written file is planned as its header says."""
    from translator.lower import lower_forward
    from translator.pattern import match_attention

    fast_tanh = model.params.get("fast_tanh")
    try:
        return lower_forward(
            model, match_attention(model), {}, fast_tanh=bool(fast_tanh is not None and fast_tanh.value)
        )
    except (TranslateError, KeyError, ValueError, TypeError, AttributeError):
        return None


def masks_in(ir: Forward | None) -> Masks | None:
    """The masks of the mask region of `ir` (`lowered`'s), None without one."""
    if ir is None or ir.header_mask != "expr" or not ir.masks:
        return None
    return Masks(tuple(ir.masks), tuple((s.name, s.default) for s in ir.scalars))


def masks_of(model: Model) -> Masks | None:
    """The masks of `model`'s mask region (None without one, or where the program does not lower yet)."""
    return masks_in(lowered(model))


Classes = Callable[[tuple[int, int], tuple[int, int]], tuple[bool, bool]]


def _classes(masks: Masks, seqlen_q: int, seqlen_k: int) -> Classes:
    """`(q, kv) -> (never, always)` of the rectangle rows q[0]…q[1] × keys kv[0]…kv[1] (unknown counts as
    neither): the block tests compiled once for all the rectangles a count visits."""
    bc = passes.block_class(masks.exprs)
    never, always = passes.evaluator(bc.never), passes.evaluator(bc.always)
    env = {"seqlen_q": seqlen_q, "seqlen_k": seqlen_k, **dict(masks.scalars)}

    def test(q: tuple[int, int], kv: tuple[int, int]) -> tuple[bool, bool]:
        rect = {**env, "q_lo": q[0], "q_hi": q[1], "kv_lo": kv[0], "kv_hi": kv[1]}
        return never(rect) is True, always(rect) is True

    return test


@functools.lru_cache(maxsize=256)
def blocks(masks: Masks, block_m: int, block_n: int, seqlen_q: int, seqlen_k: int) -> Blocks:
    classes = _classes(masks, seqlen_q, seqlen_k)
    tiles = math.ceil(seqlen_q / block_m)
    sample = sorted(
        {round(i * (tiles - 1) / max(1, SAMPLED_TILES - 1)) for i in range(min(tiles, SAMPLED_TILES))}
    )
    computed = masked = 0
    for m in sample:
        q = (m * block_m, min(seqlen_q, (m + 1) * block_m) - 1)
        for n in range(math.ceil(seqlen_k / block_n)):
            kv = (n * block_n, min(seqlen_k, (n + 1) * block_n) - 1)
            never, always = classes(q, kv)
            if never:
                continue
            computed += 1
            masked += not (always and kv[1] - kv[0] + 1 == block_n)
    return Blocks(computed / len(sample), masked / len(sample))


@functools.lru_cache(maxsize=64)
def kept_pairs(masks: Masks, seqlen_q: int, seqlen_k: int) -> float:
    """The (query, key) pairs the masks keep, estimated on a grid of rectangles (the same for every
    tiling, so it moves no ranking)."""
    classes = _classes(masks, seqlen_q, seqlen_k)
    gq = max(64, math.ceil(seqlen_q / PAIRS_CELLS))
    gk = max(64, math.ceil(seqlen_k / PAIRS_CELLS))
    total = 0.0
    for q0 in range(0, seqlen_q, gq):
        q = (q0, min(seqlen_q, q0 + gq) - 1)
        for k0 in range(0, seqlen_k, gk):
            kv = (k0, min(seqlen_k, k0 + gk) - 1)
            never, always = classes(q, kv)
            area = (q[1] - q[0] + 1) * (kv[1] - kv[0] + 1)
            total += 0.0 if never else area if always else area / 2
    return total


@functools.lru_cache(maxsize=64)
def key_block_spread(masks: Masks, block_m: int, block_n: int, seqlen_q: int, seqlen_k: int) -> float:
    """How uneven the backward's work is: the most query blocks a key block computes, over the mean of
    every key block (1 for a band or no mask, about 2 for causal, the length over the band where a few
    keys, sink tokens, see every query)."""
    classes = _classes(masks, seqlen_q, seqlen_k)
    rows = [(m * block_m, min(seqlen_q, (m + 1) * block_m) - 1) for m in range(math.ceil(seqlen_q / block_m))]
    counts = []
    for n in range(math.ceil(seqlen_k / block_n)):
        kv = (n * block_n, min(seqlen_k, (n + 1) * block_n) - 1)
        counts.append(sum(not classes(q, kv)[0] for q in rows))
    mean = sum(counts) / len(counts)
    return max(counts) / mean if mean else 1.0
