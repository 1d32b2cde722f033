"""TL301/TL306: tiles fit the target's MMA shape and its 16-byte copies.

Each warp owns BM / warps query rows in slices of the MMA's M (16), so BM is a multiple of 16 × warps
(the mma.sync kernels; sm_90's wgmma kernel ignores `warps`: its rows per consumer warp group are
`resources.kernel_limits`' rule).
BN is the N of Q·Kᵀ and the K of P·V, and the head dims are the K of Q·Kᵀ and the N of P·V: they are
multiples of the MMA's K (16 for 16-bit inputs from sm_80, 8 on sm_75, 32 for fp8). A tile row copied
from or to global memory is a whole number of 16-byte vectors (cp.async / 128-bit loads).
"""

from __future__ import annotations

from collections.abc import Iterator

from tl_language import gpu
from tl_language import syntax as ast
from tl_language.diagnostics import Diagnostic, make
from tl_language.model import Model
from tl_language.resources import warps, wgmma_kernel
from tl_language.source import Range


def _param(model: Model, name: str) -> tuple[int, ast.ParamStmt] | None:
    p = model.params.get(name)
    if p is None or p.value is None or p.value <= 0:
        return None
    return p.value, p.stmt


def _at(stmt: ast.ParamStmt) -> Range:
    return stmt.value.range if stmt.value is not None else stmt.range


def check(document: ast.Document, model: Model) -> Iterator[Diagnostic]:
    mma = model.target.mma.get(model.dtype)
    arch = model.target.arch
    if mma is not None:
        w = warps(model)
        bm = None if wgmma_kernel(model) else _param(model, "BM")
        if bm is not None and bm[0] % (mma.m * w):
            yield make("TL301", _at(bm[1]),
                       f"BM = {bm[0]} is not a multiple of {mma.m * w}: each of the {w} warps owns "
                       f"BM / warps rows in slices of the MMA's M ({mma}, {arch})")
        if (bn := _param(model, "BN")) is not None and bn[0] % mma.k:
            yield make("TL301", _at(bn[1]),
                       f"BN = {bn[0]} is not a multiple of {mma.k}, the K of {arch}'s {mma} MMA "
                       f"for {model.dtype} (BN is the reduction dimension of P·V)")
        for name in ("d", "d_qk", "d_v"):
            if (hd := _param(model, name)) is not None and hd[0] % mma.k:
                yield make("TL301", _at(hd[1]),
                           f"{name} = {hd[0]} is not a multiple of {mma.k}, the K of {arch}'s {mma} MMA "
                           f"for {model.dtype}")
    yield from _copy_rows(model)


def _copy_rows(model: Model) -> Iterator[Diagnostic]:
    elem = gpu.DTYPE_BYTES.get(model.dtype, 2)
    vec = model.target.copy_bytes
    for stmt in model.statements:
        if not isinstance(stmt, ast.CopyStmt) or not stmt.tile or stmt.src is None or stmt.dst is None:
            continue
        if "global" not in (stmt.src.name.lower(), stmt.dst.name.lower()):
            continue
        cols = model.evaluate(stmt.tile[-1])
        if cols is None or cols <= 0:
            continue
        row = cols * elem
        if row % vec:
            yield make("TL306", stmt.tile[-1].range,
                       f"a tile row of {cols} {model.dtype} elements is {row} bytes, not a multiple of the "
                       f"{vec}-byte copy; use a multiple of {vec // elem} elements")
