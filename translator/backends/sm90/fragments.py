"""The wgmma C fragments' layouts as C++ types: what CuTe's `partition_fragment_C` and `thrfrg_C` derive
for a TiledMMA of 64 × `atom_n` atoms tiled (wg_m, wg_n, 1) over warp groups, written out so a kernel
does not instantiate that layout algebra (its compile time; the types are the same, so is the machine
code). The forward's and the backward's traits use them; tests/translator/test_sm90_desc.py and
test_sm90_bwd.py check them against CuTe on the host."""

from __future__ import annotations

from dataclasses import dataclass

from translator.backends.sm90.gmma import WGMMA_M


def static_mode(n: int, stride: int) -> tuple[str, str]:
    """A layout mode of CuTe's partitions as (shape, stride) type names: a mode of one has stride 0."""
    return ("_1", "_0") if n == 1 else (f"Int<{n}>", f"Int<{stride}>")


def basis_mode(n: int, stride: int, axis: int) -> tuple[str, str]:
    """A mode of an identity tensor's partition: n steps of `stride` rows (axis 0) or columns (1)."""
    return ("_1", "_0") if n == 1 else (f"Int<{n}>", f"cute::ScaledBasis<Int<{stride}>, {axis}>")


def coord_layout(rows: int, cols: int, atom_n: int, wg_m: int, wg_n: int = 1) -> str:
    """thrfrg_C of the (rows, cols) identity layout: the 64-row C atom's thread layout (4, 8, 4) and the
    warp groups (wg_m along the rows, 64 apart; wg_n along the columns, atom_n apart), its values (2, 2,
    atom_n / 8), then the atoms each warp group repeats. One line break, after the shape."""
    thr_m, thr_ms = basis_mode(wg_m, WGMMA_M, 0)
    thr_n, thr_ns = basis_mode(wg_n, atom_n, 1)
    frg_n, frg_ns = basis_mode(atom_n // 8, 8, 1)
    rest_m, rest_ms = basis_mode(rows // (WGMMA_M * wg_m), WGMMA_M * wg_m, 0)
    rest_n, rest_ns = basis_mode(cols // (atom_n * wg_n), atom_n * wg_n, 1)
    shape = (
        f"Shape<Shape<Shape<_4, _8, _4>, Shape<{thr_m}, {thr_n}>>, "
        f"Shape<Shape<_2, _2, {frg_n}>, Shape<{rest_m}, {rest_n}>>>"
    )
    thr_v = ", ".join(f"cute::ScaledBasis<_{s}, {axis}>" for s, axis in ((2, 1), (1, 0), (16, 0)))
    frg_v = ", ".join(f"cute::ScaledBasis<_{s}, {axis}>" for s, axis in ((1, 1), (8, 0)))
    stride = (
        f"Stride<Stride<Stride<{thr_v}>, Stride<{thr_ms}, {thr_ns}>>, "
        f"Stride<Stride<{frg_v}, {frg_ns}>, Stride<{rest_ms}, {rest_ns}>>>"
    )
    return f"Layout<{shape},\n      {stride}>"


def acc_layout(rows: int, cols: int, atom_n: int, wg_m: int, wg_n: int = 1) -> str:
    """A warp group's float accumulator of the (rows, cols) tile, ((2 cols, 2 rows, atom_n / 8), MMA_M,
    MMA_N), with the compact strides make_tensor gives it (partition_fragment_C's type)."""
    mma_m, mma_n = rows // (WGMMA_M * wg_m), cols // (atom_n * wg_n)
    m, ms = static_mode(mma_m, atom_n // 2)
    n, ns = static_mode(mma_n, atom_n // 2 * mma_m)
    return (
        f"Layout<Shape<Shape<_2, _2, Int<{atom_n // 8}>>, {m}, {n}>, Stride<Stride<_1, _2, _4>, {ms}, {ns}>>"
    )


# A K-major GMMA swizzle atom's row, in 16-bit values → its swizzle's bytes (CuTe's Layout_K_SW<bytes>_Atom,
# GMMA::LayoutType::B<bytes>), widest first
SWIZZLE_BYTES = {64: 128, 32: 64, 16: 32}


@dataclass(frozen=True)
class Operand:
    """A wgmma operand in shared memory as CuTe's partition_fragment_A / _B give it for a warp group:
    `layout`, the descriptor tensor's (MMA, MMA_M or MMA_N, MMA_K) layout in 16-byte units; the
    descriptor's GMMA::LayoutType and leading and stride byte offsets (16-byte units, as
    `GMMA::make_gmma_desc` sets them); `wg_offset`, elements from the tile's start to the next warp
    group's part (0 where the warp groups share the operand)."""

    layout: str
    layout_type: str
    lbo: int
    sbo: int
    wg_offset: int


def k_major_operand(rows: int, cols: int, atom: int, wg_rows: int = 0) -> Operand:
    """A (rows, cols) tile of K-major atoms (8 rows × `atom` columns, rows first, then `atom`-wide
    column blocks) whose rows are the GEMM's M or N and columns its K; `wg_rows`: the rows each warp
    group takes (0: all of them, shared). The k16 slices are 32 bytes apart in an atom's row, then the
    next column block (rows · atom elements on)."""
    slices = atom // 16
    if cols == atom:
        k, ks = f"Int<{slices}>", "_2"
    else:
        k, ks = f"Shape<Int<{slices}>, Int<{cols // atom}>>", f"Stride<_2, Int<{rows * atom // 8}>>"
    layout = f"Layout<Shape<_1, _1, {k}>, Stride<_0, _0, {ks}>>"
    return Operand(layout, f"B{SWIZZLE_BYTES[atom]}", 1, atom, wg_rows * atom)


def mn_major_operand(rows: int, cols: int, atom: int, wg_cols: int = 0) -> Operand:
    """The transposed view of a (rows, cols) tile of K-major atoms: its columns are the GEMM's M or N
    (MN-major), its rows the K; `wg_cols`: the columns each warp group takes (0: all, shared), whole
    column blocks. A k16 slice is 16 rows (2 · atom 16-byte units); the leading byte offset steps from
    one column block to the next (0 where a warp group's columns are one block, as CuTe leaves it)."""
    extent = wg_cols or cols
    assert extent % atom == 0, "a warp group's columns are whole atoms"
    k, ks = static_mode(rows // 16, 2 * atom)
    layout = f"Layout<Shape<_1, _1, {k}>, Stride<_0, _0, {ks}>>"
    lbo = rows * atom // 8 if extent > atom else 0
    return Operand(layout, f"B{SWIZZLE_BYTES[atom]}", lbo, atom, wg_cols // atom * rows * atom)
