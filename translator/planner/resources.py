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


def shared_memory_bytes(t: Tiling) -> int:
    elem = gpu.DTYPE_BYTES[t.dtype]
    return elem * (t.block_m * t.d_qk + t.stages * t.block_n * (t.d_qk + t.d_v))


def registers_per_thread(t: Tiling, target: gpu.Target) -> int:
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


def resources(t: Tiling, target: gpu.Target) -> Resources:
    smem, regs = shared_memory_bytes(t), registers_per_thread(t, target)
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
