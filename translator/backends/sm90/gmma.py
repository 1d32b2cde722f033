"""The two wgmma atoms of the Hopper kernel, named, and the CuTe headers they need.

CuTe's `GMMA::ss_op_selector` / `rs_op_selector` pick the widest wgmma N that divides the tile's N, but
consider N beyond the base shapes (8, 16, 32, 64, 96, 128, 192, 256) only under
`#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED`, and that define pulls in every extended shape, dense and
sparse: 6.9 MB of headers, 20–27 s of a ~50 s NVRTC compile (docs/performance.md, "Compile latency").
So the atoms are chosen here, by the selector's own rule over every multiple of 8 up to 256 (the shapes
the selector had with the define, so the kernel keeps the same instructions), and named in the source;
only an N outside the base shapes includes the dense extended headers, never the sparse ones.
"""

from __future__ import annotations

from dataclasses import dataclass

# wgmma N of CuTe's base headers (cute/arch/mma_sm90_gmma.hpp); the other multiples of 8 up to 256 live
# in cute/arch/mma_sm90_gmma_ext.hpp
BASE_N = frozenset({8, 16, 32, 64, 96, 128, 192, 256})
MAX_N = 256
WGMMA_M = 64
WGMMA_K = 16  # 16-bit inputs
# (A, B) element names in CuTe's atom names, per Dtype; the accumulator is float
_TYPES = {"fp16": "F16F16", "bf16": "BF16BF16"}
EXT_INCLUDES = (
    "#include <cute/arch/mma_sm90_gmma_ext.hpp>         // wgmma N outside the base shapes (dense only)",
    "#include <cute/atom/mma_traits_sm90_gmma_ext.hpp>  // their MMA_Traits",
)


def atom_n(tile_n: int) -> int:
    """The widest wgmma N (a multiple of 8, at most 256) dividing `tile_n`, as the selector picks it."""
    for n in range(MAX_N, 0, -8):
        if tile_n % n == 0:
            return n
    raise ValueError(f"a wgmma tile N of {tile_n} is not a multiple of 8")


@dataclass(frozen=True)
class GmmaAtom:
    n: int
    operands: str  # "SS": A and B from shared memory; "RS": A from registers
    dtype: str
    major_b: str  # "K" or "MN"

    @property
    def extended(self) -> bool:
        return self.n not in BASE_N

    def cute(self) -> str:
        """The CuTe atom type, e.g.
        `SM90::GMMA::MMA_64x160x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>`."""
        name = f"MMA_{WGMMA_M}x{self.n}x{WGMMA_K}_F32{_TYPES[self.dtype]}_{self.operands}"
        return f"SM90::GMMA::{name}<GMMA::Major::K, GMMA::Major::{self.major_b}>"


def qk_atom(dtype: str, block_n: int) -> GmmaAtom:
    """S = Q·Kᵀ: both operands K-major in shared memory, N = the key tile."""
    return GmmaAtom(atom_n(block_n), "SS", dtype, "K")


def pv_atom(dtype: str, head_dim_v: int) -> GmmaAtom:
    """O += P·V: P in registers, Vᵀ MN-major in shared memory, N = the value head dim."""
    return GmmaAtom(atom_n(head_dim_v), "RS", dtype, "MN")


def extended_includes(*atoms: GmmaAtom) -> tuple[str, ...]:
    """The include lines the atoms need beyond the base headers (none when every N is a base shape)."""
    return EXT_INCLUDES if any(a.extended for a in atoms) else ()
