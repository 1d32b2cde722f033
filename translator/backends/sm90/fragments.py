"""The wgmma C fragments' layouts as C++ types: what CuTe's `partition_fragment_C` and `thrfrg_C` derive
for a TiledMMA of 64 × `atom_n` atoms tiled (wg_m, wg_n, 1) over warp groups, written out so a kernel
does not instantiate that layout algebra (its compile time; the types are the same, so is the machine
code). The forward's and the backward's traits use them; tests/translator/test_sm90_desc.py and
test_sm90_bwd.py check them against CuTe on the host."""

from __future__ import annotations

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
