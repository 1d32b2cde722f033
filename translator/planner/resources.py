"""Per-candidate resource use: shared memory per block, registers per thread, and the occupancy they allow.

The checker (TL303, TL304) measures a written document with `tl_language.resources`; the planner has to
price thousands of tilings that are not documents yet, so it computes the same quantities from a `Tiling`:
shared memory = the Q tile plus `stages` K and V tiles (exactly the checker's formula); registers = the fp32
accumulators (acc_s, acc_o) spread over the block's threads plus one k-slice of MMA operand fragments (the
checker's lower bound) plus the softmax row statistics and an allowance for addresses and loop state, so a
planned tiling never draws TL303 or TL304 (`tests/translator/planner` checks this on filled documents).
"""

from __future__ import annotations

from dataclasses import dataclass

from tl_language import gpu
from tl_language.resources import (
    HOPPER_REGISTERS,
    HOPPER_STATIC_SMEM,
    default_consumers,
    hopper_shared_bytes,
)

# Addresses, loop counters and predicates a FlashAttention-2 style main loop keeps live (an estimate).
REGISTER_OVERHEAD = 12
# The CUDA runtime reserves 1 KiB of shared memory per resident block from compute capability 8.0 on
# (none on 7.x), per the programming guide's table of technical specifications.
SMEM_RESERVED_PER_BLOCK = 1024
# Registers are allocated per warp in units of 256 (8 per thread).
REGISTER_GRANULE = 8
# No more than 32 resident blocks per SM on any target here (the programming guide's table).
MAX_BLOCKS_PER_SM = 32


@dataclass(frozen=True, slots=True)
class Tiling:
    """The numbers a kernel's resources depend on."""

    block_m: int
    block_n: int
    warps: int
    stages: int
    d_qk: int
    d_v: int
    dtype: str

    @property
    def threads(self) -> int:
        return self.warps * 32


@dataclass(frozen=True, slots=True)
class Resources:
    shared_bytes: int
    registers: int  # per thread
    threads: int
    blocks_per_sm: int  # 0: does not fit at all
    limited_by: str  # "shared memory" | "registers" | "block limit"


def shared_memory_bytes(t: Tiling, target: gpu.Target | None = None) -> int:
    elem = gpu.DTYPE_BYTES[t.dtype]
    if target is not None and target.wgmma:
        # the sm_90 kernel's own accounting (mbarriers, alignment pad, static shared memory), as TL303's
        return hopper_shared_bytes(t.block_m, t.block_n, t.d_qk, t.d_v, t.stages, elem) + HOPPER_STATIC_SMEM
    return elem * (t.block_m * t.d_qk + t.stages * t.block_n * (t.d_qk + t.d_v))


def hopper_consumers(t: Tiling) -> int:
    """Consumer warp groups of the sm_90 kernel for this tiling (the plan's default split)."""
    return default_consumers(t.block_m)


def hopper_registers(t: Tiling) -> tuple[int, int]:
    """(registers per consumer thread, the `setmaxnreg` budget it gets) on sm_90: the fp32 accumulators
    over the consumer warp groups' threads, P as the 16-bit A operand of P·V (Q, K and V stay in shared
    memory for wgmma), the row statistics and the same allowance as the mma.sync estimate."""
    consumers = hopper_consumers(t)
    threads = 128 * consumers
    elem = gpu.DTYPE_BYTES[t.dtype]
    acc = -(-(t.block_m * t.block_n + t.block_m * t.d_v) // threads)
    p_frag = -(-(t.block_m * t.block_n * elem) // (4 * threads))
    stats = 2 * 2 * (t.block_m // consumers // 64) * 2  # row max and sum, two rows per 8-row quad slice
    return acc + p_frag + stats + REGISTER_OVERHEAD, HOPPER_REGISTERS.get(consumers, HOPPER_REGISTERS[3])[1]


def registers_per_thread(t: Tiling, target: gpu.Target) -> int:
    if target.wgmma:
        return hopper_registers(t)[0]
    mma = target.mma.get(t.dtype) or next(iter(target.mma.values()))
    elem = gpu.DTYPE_BYTES[t.dtype]
    threads = t.threads
    acc_s = t.block_m * t.block_n // threads  # fp32, one register each
    acc_o = t.block_m * t.d_v // threads
    m_tiles = max(1, t.block_m // t.warps // mma.m)
    # One k-slice of operands: A (m16 x k) and the wider of the two GEMMs' B (n x k), 32-bit registers.
    a_frag = m_tiles * (mma.m * mma.k * elem // 4 // 32)
    b_frag = max(t.block_n, t.d_v) // mma.n * (mma.n * mma.k * elem // 4 // 32)
    stats = 2 * 2 * m_tiles  # row max and row sum for the two rows a thread owns per m-tile
    return acc_s + acc_o + a_frag + b_frag + stats + REGISTER_OVERHEAD


def register_budget(t: Tiling, target: gpu.Target) -> int:
    return hopper_registers(t)[1] if target.wgmma else target.regs_per_thread


def resources(t: Tiling, target: gpu.Target) -> Resources:
    smem, regs = shared_memory_bytes(t, target), registers_per_thread(t, target)
    if target.wgmma:
        # One block per SM: the kernel is built with __launch_bounds__(threads, 1) and setmaxnreg hands
        # the whole register file to the producer and consumer warp groups.
        threads = 128 * (hopper_consumers(t) + 1)
        fits = smem <= target.smem_per_block and regs <= register_budget(t, target)
        return Resources(smem, regs, threads, 1 if fits else 0, "registers" if fits else "does not fit")
    threads = t.threads
    too_big = smem > target.smem_per_block or regs > target.regs_per_thread
    if too_big or threads > target.max_threads_per_block:
        return Resources(smem, regs, threads, 0, "does not fit")
    reserved = SMEM_RESERVED_PER_BLOCK if target.compute_capability >= (8, 0) else 0
    by_smem = target.smem_per_sm // (smem + reserved)
    regs_alloc = -(-regs // REGISTER_GRANULE) * REGISTER_GRANULE
    by_regs = target.regs_per_sm // (regs_alloc * threads)
    blocks = min(by_smem, by_regs, MAX_BLOCKS_PER_SM)
    limited = "shared memory" if blocks == by_smem else "registers" if blocks == by_regs else "block limit"
    return Resources(smem, regs, threads, blocks, limited)
