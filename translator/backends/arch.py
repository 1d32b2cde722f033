"""Per-architecture facts of the mma.sync family (sm_75 … sm_89, and sm_90 until its own backend).

Everything that differs between Turing and Ampere/Ada lives here as data, so the emitters do not branch on
architecture names: the MMA atom, whether global → shared copies are asynchronous, and the ldmatrix atoms.
"""

from __future__ import annotations

from dataclasses import dataclass

from translator.plan import KernelPlan

ELEMENT = {"fp16": "cute::half_t", "bf16": "cute::bfloat16_t"}


@dataclass(frozen=True, slots=True)
class ArchFacts:
    mma_atom: str  # CuTe MMA operation (F32 accumulators)
    mma_k: int  # the atom's K: 16 (m16n8k16) or 8 (m16n8k8)
    cp_async: bool  # cp.async global → shared (sm_80+); else 128-bit loads and stores through registers
    gmem_copy_op: str
    ldsm: str  # ldmatrix for Q and K (row-major operands)
    ldsm_t: str  # transposing ldmatrix for Vᵀ
    tile_k: int  # the TiledMMA's K tile: one atom, so each k-slice of a fragment is one ldmatrix slice


def arch_facts(plan: KernelPlan) -> ArchFacts:
    major, minor = plan.compute_capability
    if (major, minor) < (8, 0):
        return ArchFacts(
            mma_atom="SM75_16x8x8_F32F16F16F32_TN",
            mma_k=8,
            cp_async=False,
            gmem_copy_op="UniversalCopy<cute::uint128_t>",
            # A k8 slice of a warp's operands is two 8×8 matrices: ldmatrix .x2 (and .x2.trans for Vᵀ).
            ldsm="SM75_U32x2_LDSM_N",
            ldsm_t="SM75_U16x4_LDSM_T",
            tile_k=8,
        )
    ab = "BF16BF16" if plan.dtype == "bf16" else "F16F16"
    return ArchFacts(
        mma_atom=f"SM80_16x8x16_F32{ab}F32_TN",
        mma_k=16,
        cp_async=True,
        gmem_copy_op="SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>",
        ldsm="SM75_U32x4_LDSM_N",
        ldsm_t="SM75_U16x8_LDSM_T",
        tile_k=16,
    )


@dataclass(frozen=True, slots=True)
class SmemGeometry:
    """A swizzled shared-memory atom of 8 rows: 64 elements (128 bytes) per row when the head dimension is
    a multiple of 64 (Swizzle<3,3,3>), else 32 (Swizzle<2,3,3>), so 16-byte cp.async stores and ldmatrix
    reads of 8 rows hit distinct banks."""

    head_dim: int

    @property
    def block_k(self) -> int:
        return 64 if self.head_dim % 64 == 0 else 32

    @property
    def swizzle_bits(self) -> int:
        return 3 if self.block_k == 64 else 2

    @property
    def threads_per_row(self) -> int:
        return self.block_k // 8


def smem_bytes(plan: KernelPlan) -> dict[str, int]:
    """Bytes of each shared buffer; O reuses Q's buffer when it fits (Q·Kᵀ is done by then)."""
    e = 2
    q = plan.block_m * plan.head_dim_qk * e
    k = plan.stages * plan.block_n * plan.head_dim_qk * e
    v = plan.stages * plan.block_n * plan.head_dim_v * e
    o = 0 if plan.head_dim_v <= plan.head_dim_qk else plan.block_m * plan.head_dim_v * e
    return {"q": q, "k": k, "v": v, "o": o, "total": q + k + v + o}
