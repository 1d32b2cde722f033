"""The planner's cost model: a predicted fraction of the tensor cores' peak for one tiling and one shape.

Per SM and per main-loop iteration (one K/V tile), a block spends
  - MMA cycles: 2·BM·BN·(d_qk + d_v) FLOPs at the SM's tensor rate, slowed when the warp tile is too small
    to feed the tensor cores from shared memory (operand bytes per MMA against shared-memory bandwidth);
  - softmax cycles: BM·BN exponentials on the special-function units;
  - load cycles: BN·(d_qk + d_v) bytes of K and V at the SM's share of L2 bandwidth.
Loads overlap the math when the K/V pipeline has two or more stages or another block on the SM has work;
otherwise they add. The whole problem runs in waves of SMs × blocks-per-SM blocks, so the last partial
wave costs a full one (wave quantisation), and tiles past the sequence end are wasted (padding).

Every factor is in [0, 1] and reported in the candidate's breakdown, so a ranking explains itself. The rates
are the datasheet figures per SM and clock (A100/H100 whitepapers); only their ratios matter for ranking.
`benchmarks/planner_vs_measured.py` compares the ranking with measured TFLOPS.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from kernel_ir.passes import ScoreCost
from tl_language import gpu
from translator.planner.masks import Masks, kept_pairs
from translator.planner.masks import blocks as mask_blocks
from translator.planner.resources import Resources, Tiling


@dataclass(frozen=True, slots=True)
class Shape:
    batch: int = 4
    heads: int = 16
    seqlen_q: int = 4096
    seqlen_k: int = 4096

    def __str__(self) -> str:
        return f"{self.batch},{self.heads},{self.seqlen_q},{self.seqlen_k}"

    @staticmethod
    def parse(text: str) -> Shape:
        """`B,H,Sq,Sk` (or `B,H,S` for Sq = Sk). Raises ValueError with the offending text."""
        parts = [p.strip() for p in text.split(",")]
        if len(parts) == 3:
            parts.append(parts[2])
        if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"shape `{text}` is not B,H,Sq,Sk with positive integers (e.g. 4,16,4096,4096)")
        b, h, sq, sk = (int(p) for p in parts)
        return Shape(b, h, sq, sk)


DEFAULT_SHAPE = Shape()


@dataclass(frozen=True, slots=True)
class Rates:
    """Per SM per clock: dense 16-bit tensor FLOPs, shared-memory bytes, L2 bytes, exponentials."""

    mma_flops: float
    smem_bytes: float
    l2_bytes: float
    sfu_ops: float
    alu_ops: float = 128  # 32-bit integer / FP32 instructions per SM per clock (4 schedulers × 32 lanes)


_RATES: dict[str, Rates] = {
    "sm_75": Rates(mma_flops=1024, smem_bytes=64, l2_bytes=32, sfu_ops=16),
    "sm_80": Rates(mma_flops=2048, smem_bytes=128, l2_bytes=48, sfu_ops=16),
    "sm_86": Rates(mma_flops=1024, smem_bytes=128, l2_bytes=32, sfu_ops=16),
    "sm_89": Rates(mma_flops=1024, smem_bytes=128, l2_bytes=32, sfu_ops=16),
    "sm_90": Rates(mma_flops=4096, smem_bytes=128, l2_bytes=64, sfu_ops=16),
}


# sm_90: cycles per main-loop iteration that neither the tensor cores nor the exp2 units fill (barrier and
# ping-pong hand-overs, wgmma issue and waits). Order of magnitude from the H200 key-tile sweep at head dim
# 128 (docs/hopper.md; docs/results/2026-11-30-h200-sm90-sweeps.json): BN 128 to 176 within 2 %, i.e. a
# few hundred cycles against ~2,600 of wgmma per 128×160 block.
HOPPER_ITER_CYCLES = 200
# sm_90, programs with a mask region: what a query tile costs besides its key blocks (the prologue's loads
# and barriers, the first block's unpipelined Q·Kᵀ, the epilogue), in the cycles of the model's BM 128 ×
# BN 128 key block (2048 of wgmma + HOPPER_ITER_CYCLES): the H200 window sweep's intercept over its slope
# is 3.6 such blocks a tile (docs/results/2026-12-02-h200-window-sweep.json; 4.1 in the second sweep,
# -window-sweep-persistent.json). The plain kernels keep the Q/O term below, which their measured
# ranking was validated with.
HOPPER_TILE_CYCLES = 8000
# Instructions per score of a block the classification cannot prove whole (a mask bit test and a select,
# or a compare more), on the SM's integer / FP32 issue slots.
MASK_OPS_PER_SCORE = 3


def rates(target: gpu.Target) -> Rates:
    return _RATES.get(target.arch, _RATES["sm_80"])


@dataclass(frozen=True, slots=True)
class Cost:
    score: float  # predicted fraction of tensor peak, in [0, 1]
    breakdown: dict[str, float]


def _feed_efficiency(m_tiles: int, n_tiles: int, mma: gpu.MmaShape, elem: int, r: Rates) -> float:
    """How well a warp tile of m_tiles x n_tiles MMAs is fed from shared memory per k-slice."""
    a_bytes = mma.m * mma.k * elem
    b_bytes = mma.n * mma.k * elem
    bytes_per_mma = (m_tiles * a_bytes + n_tiles * b_bytes) / (m_tiles * n_tiles)
    mma_per_clk = r.mma_flops / (2 * mma.m * mma.n * mma.k)
    return min(1.0, (r.smem_bytes / bytes_per_mma) / mma_per_clk)


def estimate(
    t: Tiling,
    res: Resources,
    target: gpu.Target,
    shape: Shape,
    *,
    causal: bool,
    sms: int | None = None,
    masks: Masks | None = None,
) -> Cost:
    """`masks`: the program's mask region (`translator.planner.masks`): its key blocks per query tile and
    its kept pairs replace the header's (`causal`), and its masked blocks cost their per-score test."""
    r = rates(target)
    mma = target.mma.get(t.dtype) or next(iter(target.mma.values()))
    elem = gpu.DTYPE_BYTES[t.dtype]
    sms = sms or max(p.sms for p in target.parts)

    flops_iter = 2.0 * t.block_m * t.block_n * (t.d_qk + t.d_v)
    sfu_cyc = t.block_m * t.block_n / r.sfu_ops
    load_cyc = t.block_n * (t.d_qk + t.d_v) * elem / r.l2_bytes
    if target.wgmma:
        # wgmma reads its operands from shared memory through descriptors (no per-warp feed limit), and
        # the Hopper kernel overlaps the softmax with the GEMMs (intra-warp-group pipelining, ping-pong
        # between consumer groups): an iteration costs the longer of the two plus its hand-overs.
        feed = 1.0
        mma_cyc = flops_iter / r.mma_flops
        compute_cyc = max(mma_cyc, sfu_cyc) + HOPPER_ITER_CYCLES
    else:
        m_tiles = max(1, t.block_m // t.warps // mma.m)
        feed = min(
            _feed_efficiency(m_tiles, max(1, t.block_n // mma.n), mma, elem, r),
            _feed_efficiency(m_tiles, max(1, t.d_v // mma.n), mma, elem, r),
        )
        mma_cyc = flops_iter / r.mma_flops / feed
        compute_cyc = mma_cyc + sfu_cyc
    overlapped = t.stages >= 2 or res.blocks_per_sm >= 2
    iter_cyc = max(compute_cyc, load_cyc) if overlapped else compute_cyc + load_cyc

    q_tiles = math.ceil(shape.seqlen_q / t.block_m)
    k_tiles = math.ceil(shape.seqlen_k / t.block_n)
    if causal:
        # Bottom-right aligned: query tile i sees keys up to its last row, shifted by Sk - Sq.
        shift = shape.seqlen_k - shape.seqlen_q
        iters = [
            min(k_tiles, max(0, math.ceil((min(shape.seqlen_q, (i + 1) * t.block_m) + shift) / t.block_n)))
            for i in range(q_tiles)
        ]
        mean_iters = sum(iters) / q_tiles
    else:
        mean_iters = float(k_tiles)
    prologue_cyc = t.block_m * (t.d_qk + t.d_v) * elem / r.l2_bytes  # load Q, store O
    mask_cyc = 0.0
    visible = _visible_pairs(shape, causal)
    if masks is not None:
        kb = mask_blocks(masks, t.block_m, t.block_n, shape.seqlen_q, shape.seqlen_k)
        mean_iters = kb.computed
        mask_cyc = kb.masked * t.block_m * t.block_n * MASK_OPS_PER_SCORE / r.alu_ops
        visible = max(1, round(kept_pairs(masks, shape.seqlen_q, shape.seqlen_k)))
        if target.wgmma:
            prologue_cyc = HOPPER_TILE_CYCLES

    blocks = q_tiles * shape.batch * shape.heads
    slots = sms * max(1, res.blocks_per_sm)
    waves = math.ceil(blocks / slots)
    wave_eff = blocks / (waves * slots)
    # An SM runs its resident blocks concurrently, sharing its tensor cores: a wave takes the time of
    # blocks_per_sm blocks run back to back. Tiles past the sequence end and masked-out keys cost time
    # but do no useful work, so they show up only in the denominator.
    block_cyc = mean_iters * iter_cyc + mask_cyc + prologue_cyc
    total_cyc = waves * max(1, res.blocks_per_sm) * block_cyc
    useful_flops = shape.batch * shape.heads * 2.0 * visible * (t.d_qk + t.d_v)
    score = useful_flops / (total_cyc * sms * r.mma_flops)
    breakdown = {
        "blocks_per_sm": float(res.blocks_per_sm),
        "waves": float(waves),
        "wave_efficiency": wave_eff,
        "mma_feed_efficiency": feed,
        "tile_efficiency": visible / (q_tiles * t.block_m * max(mean_iters, 1e-9) * t.block_n),
        "load_overlap": 1.0 if overlapped else compute_cyc / (compute_cyc + load_cyc),
        "softmax_share": sfu_cyc / (mma_cyc + sfu_cyc),
        "flops_per_kv_byte": flops_iter / (t.block_n * (t.d_qk + t.d_v) * elem),
    }
    return Cost(score=max(0.0, min(1.0, score)), breakdown=breakdown)


@functools.lru_cache(maxsize=64)
def _visible_pairs(shape: Shape, causal: bool) -> int:
    """(query, key) pairs the softmax sees: all of them, or the bottom-right aligned causal triangle."""
    if not causal:
        return shape.seqlen_q * shape.seqlen_k
    shift = shape.seqlen_k - shape.seqlen_q
    return sum(min(shape.seqlen_k, max(0, r + shift + 1)) for r in range(shape.seqlen_q))


# ---- the transcendental split: exp2s on the SFU or as a polynomial on the FP32 pipe ----------------------

# Per score, the instructions besides the score region's own: the softmax's FFMA against the row max, its
# max, sum and half a conversion, and the main loop's share of wgmma issue, barriers and rescaling; and
# the instructions of one `tl::exp2_fma` (clamp, round, four-term polynomial, exponent shift). Each
# instruction takes an issue slot of its SM sub-partition (four per SM, one warp instruction a clock:
# 128 thread-instructions a clock), whichever pipe runs it. Both numbers are counted in softcap's static
# SASS (`benchmarks/sass_exp_split.py`): 3312 instructions for 165 scores' worth of MUFU at fma_exps 0,
# i.e. 20 a score = its 3 MUFU + 5 FP32 + LOOP_ISSUE; each moved exp2 adds 10.6 and removes one MUFU.
# The H200 A/B (docs/results/2026-12-01-h200-fma-exps-ab.json: 0 and 2 of 8 equal, 4 -9 %, 6 -21 %,
# 8 -32 %) agrees: the model puts the best at 1 with 0 and 2 a few per cent behind.
LOOP_ISSUE = 12
EXP2_FMA_ISSUE = 11.6
# The SFU must be busier than this fraction of the tensor cores' time per score before exps move:
# below it, the exps hide under the GEMMs (the plain kernel's one exp2 a score uses 1/2 at head dim 128).
SFU_HEADROOM = 0.75
FMA_EXP_EIGHTHS = 8  # the split's granularity: of every eight columns of a thread's scores
ISSUE_PER_SM = 128


def fma_exp_share(cost: ScoreCost, *, softmax: bool, d_qk: int, d_v: int, target: gpu.Target) -> int:
    """How many of every eight exp2s per score (the score region's and the softmax's) run on the FP32
    pipe: the count that minimises the busier of the SFU and the SM's issue slots, or 0 while the SFU
    hides under the tensor cores. `cost` is the rendered score region's (`kernel_ir.passes.score_cost`)."""
    r = rates(target)
    exps = cost.exps + (1 if softmax else 0)
    mufu = cost.mufu + (1 if softmax else 0)
    issued = mufu + cost.fp32 + LOOP_ISSUE
    mma_cyc = 2 * (d_qk + d_v) / r.mma_flops

    def busiest(k: int) -> float:
        moved = exps * k / FMA_EXP_EIGHTHS
        return max((mufu - moved) / r.sfu_ops, (issued + moved * (EXP2_FMA_ISSUE - 1)) / ISSUE_PER_SM)

    if exps == 0 or mufu / r.sfu_ops <= SFU_HEADROOM * mma_cyc:
        return 0
    return min(range(FMA_EXP_EIGHTHS + 1), key=lambda k: (busiest(k), k))
