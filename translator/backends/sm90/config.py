"""Hopper facts derived from a `KernelPlan`: warp-group split, registers, shared-memory map, limits.

The sm_90 backend reads the same plan as the mma.sync backend; everything Hopper-specific that follows from
the plan's numbers (how many consumer warp groups, the `setmaxnreg` split, where each buffer and mbarrier
lives in shared memory, how many 128-byte TMA boxes a tile takes) is computed here, once, as data, so the
emitter only prints it. `check` reports what the Hopper kernel cannot do as TL501 on the TL line at fault.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel_ir import passes
from tl_language import gpu
from tl_language.diagnostics import Diagnostic
from tl_language.resources import (
    HOPPER_MAX_CONSUMERS,
    HOPPER_REGISTERS,
    HOPPER_SMEM_ALIGN,
    HOPPER_STATIC_SMEM,
    HOPPER_WGMMA_M,
    hopper_barrier_bytes,
    hopper_o_own_buffer,
)
from translator.errors import TranslateError, unsupported
from translator.plan import KernelPlan
from translator.planner.cost import fma_exp_share

ELEMENT = {"fp16": "cute::half_t", "bf16": "cute::bfloat16_t"}
ELEMENT_BYTES = 2
BOX_COLS = 64  # one TMA box and one GMMA swizzle atom row: 64 16-bit elements = 128 bytes (SWIZZLE_128B)
SMEM_LIMIT = gpu.TARGETS["sm_90"].smem_per_block  # opt-in shared memory per block: 227 KB
# The numbers the checker's TL303/TL304 estimates use too live in the language core (one source):
WGMMA_M = HOPPER_WGMMA_M  # rows of one wgmma instruction; a consumer warp group owns a multiple of this
STATIC_SMEM = HOPPER_STATIC_SMEM  # 1 KB of static shared memory in the compiled kernel, same 227 KB limit
SMEM_ALIGN = HOPPER_SMEM_ALIGN  # the 128-byte swizzle repeats every 8 rows = 1024 bytes
MAX_CONSUMERS = HOPPER_MAX_CONSUMERS
REGISTERS = HOPPER_REGISTERS  # setmaxnreg (producer, consumer) per number of consumer warp groups


@dataclass(frozen=True, slots=True)
class HopperConfig:
    plan: KernelPlan
    consumers: int  # consumer warp groups; warp group 0 is the producer
    overlap: bool  # intra-warp-group pipelining: Q·Kᵀ of block n+1 overlaps softmax, P·V of block n drains
    # The consumer warp groups (two or three) take turns issuing their GEMMs, a ring of named barriers, so
    # one group's softmax runs while the others' GEMMs occupy the tensor cores (FlashAttention 3's ping-pong).
    pingpong: bool = False
    # One block per SM walks the query tiles (blockIdx.x, += gridDim.x): the producer's K/V ring runs on
    # across tiles, so the next tile's first loads overlap this tile's last blocks and its epilogue.
    persistent: bool = False

    @property
    def split_softmax(self) -> bool:
        """The pipelined loop waits for P·V in the middle of the softmax, FA4's schedule (on the H200:
        d64 +3 %, d128 +1–2 %; at d_v 256 −1 to −3 %: docs/results/2026-11-30-h200-sm90-sweeps-sixth.json),
        and the plain loop has no P·V in flight to wait for. Without a Softmax there is nothing to split."""
        return self.overlap and self.plan.head_dim_v <= 128 and self.plan.ir.normalizer == "softmax"

    @property
    def split_softmax_cols(self) -> int:
        """Columns of each row whose exps run before P·V's wait (two rows a thread: twice as many exps). FA4's
        SASS has ten to twelve exps there; on the H200 d_v 64 is 3-4 % faster with 4 columns than with 6
        and d_v 128 without a mask 1-2 % slower, 8 and 10 no better anywhere
        (docs/results/2026-11-30-h200-sm90-sweeps-sixth.json)."""
        return 4 if self.plan.head_dim_v <= 64 else 6

    @property
    def fma_exps(self) -> int:
        """exp2s of every eight columns computed on the FP32 pipe (`Param fma_exps`, else the planner's
        balance of the SFU against the SM's issue slots for this score region: `fma_exp_share`)."""
        p = self.plan
        if p.fma_exps >= 0:
            return p.fma_exps
        if p.ir.plain:  # the tuned plain kernel stays as measured unless the TL asks
            return 0
        softmax = p.ir.normalizer == "softmax"
        value = passes.rendered_score(p.ir.score, softmax=softmax, fast_tanh=p.ir.fast_tanh)
        cost = passes.score_cost(value) if value is not None else passes.ScoreCost(0, 0, 0)
        target = gpu.target(p.arch) or gpu.TARGETS["sm_90"]
        return fma_exp_share(cost, softmax=softmax, d_qk=p.head_dim_qk, d_v=p.head_dim_v, target=target)

    @property
    def varlen(self) -> bool:
        """A packed prefill (`Param varlen = 1`, one block per tile): the inference ABI, per-sequence rows."""
        inf = self.plan.inference
        return inf is not None and inf.varlen

    @property
    def threads(self) -> int:
        return 128 * (self.consumers + 1)

    @property
    def consumer_threads(self) -> int:
        return 128 * self.consumers

    @property
    def rows_per_consumer(self) -> int:
        return self.plan.block_m // self.consumers

    @property
    def producer_regs(self) -> int:
        return REGISTERS[self.consumers][0]

    @property
    def consumer_regs(self) -> int:
        return REGISTERS[self.consumers][1]

    @property
    def boxes_qk(self) -> int:
        return self.plan.head_dim_qk // BOX_COLS

    @property
    def boxes_v(self) -> int:
        return self.plan.head_dim_v // BOX_COLS

    @property
    def reuse_q_for_o(self) -> bool:
        """O is staged in Q's buffer (Q·Kᵀ is done by then), as in the sm_80 path, unless a persistent
        kernel can give it its own (then the next tile's Q loads during this tile's store)."""
        p = self.plan
        return not hopper_o_own_buffer(
            p.block_m, p.block_n, p.head_dim_qk, p.head_dim_v, p.stages, self.persistent, ELEMENT_BYTES
        )

    def smem(self) -> dict[str, int]:
        """Byte offset of every buffer and of the mbarriers, and the total the launch must request."""
        p = self.plan
        q = p.block_m * p.head_dim_qk * ELEMENT_BYTES
        k = p.stages * p.block_n * p.head_dim_qk * ELEMENT_BYTES
        v = p.stages * p.block_n * p.head_dim_v * ELEMENT_BYTES
        o = 0 if self.reuse_q_for_o else p.block_m * p.head_dim_v * ELEMENT_BYTES
        barriers = hopper_barrier_bytes(p.stages)  # Q full/empty; K and V full/empty per stage
        off_k = q
        off_v = off_k + k
        off_o = 0 if self.reuse_q_for_o else off_v + v
        off_bar = off_v + v + o
        # + SMEM_ALIGN: the kernel rounds the dynamic shared-memory base up to 1024 bytes itself.
        total = off_bar + barriers + SMEM_ALIGN
        return {
            "q": q,
            "k": k,
            "v": v,
            "o": o,
            "off_k": off_k,
            "off_v": off_v,
            "off_o": off_o,
            "off_bar": off_bar,
            "barriers": barriers,
            "total": total,
        }

    def tx_bytes(self) -> dict[str, int]:
        """Bytes each TMA load brings in: the mbarrier's expected transaction count (full boxes, tails
        included: TMA counts the zero-filled rows past the end of the tensor too)."""
        p = self.plan
        return {
            "q": p.block_m * p.head_dim_qk * ELEMENT_BYTES,
            "k": p.block_n * p.head_dim_qk * ELEMENT_BYTES,
            "v": p.block_n * p.head_dim_v * ELEMENT_BYTES,
        }


def hopper_config(
    plan: KernelPlan,
    *,
    consumers: int | None = None,
    overlap: bool = True,
    pingpong: bool = False,
    persistent: bool = False,
) -> HopperConfig:
    """The Hopper structure for `plan`; `consumers` defaults to one warp group per 64 query rows
    (FlashAttention 3's split). Raises TranslateError (TL501) on the line that sets a value it cannot use."""
    n = consumers if consumers is not None else max(1, plan.block_m // WGMMA_M)
    cfg = HopperConfig(plan=plan, consumers=n, overlap=overlap, pingpong=pingpong, persistent=persistent)
    problems = _check(cfg)
    if problems:
        raise TranslateError(problems)
    return cfg


def _check(cfg: HopperConfig) -> list[Diagnostic]:
    p = cfg.plan
    out: list[Diagnostic] = []

    def bad(message: str, *keys: str) -> None:
        out.append(unsupported(p.range_of(*keys), message))

    if p.dtype not in ELEMENT:
        bad(f"Dtype {p.dtype}: the sm_90 wgmma kernel takes fp16 or bf16 (fp8 is not built yet)", "dtype")
    if not 1 <= cfg.consumers <= MAX_CONSUMERS:
        bad(
            f"{cfg.consumers} consumer warp groups: sm_90 kernels here use 1 to {MAX_CONSUMERS} "
            "(one per 64 query rows is FlashAttention 3's split)",
            "consumers",
            "BM",
            "load_q",
        )
    elif p.block_m % cfg.consumers or cfg.rows_per_consumer % WGMMA_M:
        bad(
            f"BM = {p.block_m} over {cfg.consumers} consumer warp groups leaves "
            f"{p.block_m / cfg.consumers:g} rows each; wgmma needs a multiple of {WGMMA_M} rows per "
            "warp group",
            "BM",
            "load_q",
        )
    if p.block_n % 16 or not 16 <= p.block_n <= 256:
        bad(
            f"BN = {p.block_n}: on sm_90 the key tile is the wgmma N of Q·Kᵀ and the K of P·V: a multiple of "
            "16 from 16 to 256",
            "BN",
            "load_k",
        )
    for d, what, keys in (
        (p.head_dim_qk, "d_qk", ("d_qk", "d", "load_k")),
        (p.head_dim_v, "d_v", ("d_v", "d", "load_v")),
    ):
        if d % BOX_COLS or not BOX_COLS <= d <= 256:
            bad(
                f"{what} = {d}: the sm_90 kernel moves tiles in 128-byte swizzled TMA boxes of {BOX_COLS} "
                "columns: head dims 64, 128, 192 or 256",
                *keys,
            )
    if cfg.pingpong and (cfg.consumers < 2 or not cfg.overlap):
        bad(
            "ping-pong scheduling passes the GEMM turn between two or three consumer warp groups of the "
            "overlapped loop",
            "consumers",
            "BM",
            "load_q",
        )
    if not 1 <= p.stages <= 4:
        bad(
            f"stages = {p.stages}: the K/V mbarrier pipeline takes 1 to 4 stages (2 is FlashAttention 3's)",
            "stages",
            "load_k",
        )
    if p.head_dim_v > p.head_dim_qk:
        bad(
            "d_v > d_qk: O is staged in Q's shared buffer for its TMA store, so d_v must not exceed d_qk",
            "d_v",
            "store_o",
        )
    if cfg.varlen and cfg.persistent:
        bad(
            "persistent = 1 with varlen = 1: the persistent tile walk knows one sequence length; a packed "
            "batch runs one block per tile",
            "persistent",
            "varlen",
        )
    total = cfg.smem()["total"]
    if not out and total + STATIC_SMEM > SMEM_LIMIT:
        bad(
            f"the tiles need {total // 1024} KB of shared memory (Q {p.block_m}×{p.head_dim_qk}, K and V "
            f"{p.stages}×{p.block_n} rows) but sm_90 gives a block at most {SMEM_LIMIT // 1024} KB: use a "
            "smaller BN or fewer stages",
            "BN",
            "stages",
            "load_k",
        )
    return out
