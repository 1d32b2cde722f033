"""Resource facts of a kernel: tile parameters, head dims, shared memory and register estimates.

One place for the numbers the checker (TL301–TL307), hover, the translator and the planner all need, so
they never disagree. Each function returns None where the document leaves a size unknown (a `?` hole,
a symbolic tile).
"""

from __future__ import annotations

from dataclasses import dataclass

from tl_language import gpu
from tl_language import syntax as ast
from tl_language.facts import enclosing_loops
from tl_language.model import Model
from tl_language.ops import op as lookup_op

DEFAULT_WARPS = 4
WARP_CHOICES = (1, 2, 4, 8, 16)

# Parameters with a meaning the toolchain knows (hover shows these; the checker validates them).
SPECIAL_PARAMS: dict[str, str] = {
    "BM": "query rows per thread block (the M tile of both GEMMs)",
    "BN": "key/value rows per loop iteration (the N tile of Q·Kᵀ, the K tile of P·V)",
    "d": "head dimension of Q, K and V (when QK and V head dims are equal)",
    "d_qk": "head dimension of Q and K (the reduction dimension of Q·Kᵀ)",
    "d_v": "head dimension of V and O (the N dimension of P·V)",
    "warps": f"warps per thread block; each warp owns BM / warps query rows (default {DEFAULT_WARPS})",
    "stages": "shared-memory buffers for the K/V pipeline (default 2 with cp.async, 1 without)",
    "group": "query heads per key/value head (GQA); heads / heads_kv",
    "heads_kv": "number of key/value heads (1 for MQA)",
}


def param_value(model: Model, name: str) -> int | None:
    p = model.params.get(name)
    return p.value if p else None


def warps(model: Model) -> int:
    v = param_value(model, "warps")
    return v if v in WARP_CHOICES else DEFAULT_WARPS


def stages(model: Model) -> int:
    v = param_value(model, "stages")
    if v is not None and v >= 1:
        return v
    return 2 if model.target.cp_async else 1


def threads(model: Model) -> int:
    return warps(model) * model.target.warp_size


def head_dims(model: Model) -> tuple[int | None, int | None]:
    """(QK head dim, V head dim): `d_qk`/`d_v` params, else `d`, else the last dim of global Q / V."""
    d = param_value(model, "d")
    d_qk = param_value(model, "d_qk") if "d_qk" in model.params else d
    d_v = param_value(model, "d_v") if "d_v" in model.params else d
    if d_qk is None and "d_qk" not in model.params and "d" not in model.params:
        d_qk = _global_last_dim(model, "Q")
    if d_v is None and "d_v" not in model.params and "d" not in model.params:
        d_v = _global_last_dim(model, "V")
    return d_qk, d_v


def _global_last_dim(model: Model, name: str) -> int | None:
    t = model.tensors.get(name)
    shape = t.shape_at("global") if t else None
    return model.evaluate(shape[-1]) if shape else None


def tile_elements(model: Model, tile: list[ast.Expr] | None) -> int | None:
    if not tile:
        return None
    n = 1
    for e in tile:
        v = model.evaluate(e)
        if v is None or v <= 0:
            return None
        n *= v
    return n


def is_accumulator(model: Model, name: str) -> bool:
    """A register tensor born in registers (Allocate or Compute): fp32, unlike copied-in operands."""
    t = model.tensors.get(name)
    if t is None or "register" not in t.placements:
        return False
    return not isinstance(t.placements["register"].stmt, ast.CopyStmt)


def element_bytes(model: Model, name: str, level: str) -> int:
    if level == "register" and is_accumulator(model, name):
        return gpu.DTYPE_BYTES["fp32"]
    return gpu.DTYPE_BYTES.get(model.dtype, 2)


def bytes_per_block(model: Model, name: str, level: str) -> int | None:
    """Bytes one thread block holds of tensor `name` at `level` (one buffer; stages not included)."""
    t = model.tensors.get(name)
    if t is None or level not in t.placements or level == "global":
        return None
    n = tile_elements(model, t.placements[level].tile)
    return None if n is None else n * element_bytes(model, name, level)


# ---- shared memory ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SharedBuffer:
    tensor: str
    bytes: int  # one buffer
    staged: bool  # loaded inside a loop, so multiplied by the pipeline stages


def shared_memory_breakdown(model: Model) -> list[SharedBuffer] | None:
    """Every shared-memory tile of the block; None if any tile size is unknown."""
    out: list[SharedBuffer] = []
    for t in model.tensors.values():
        p = t.placements.get("shared")
        if p is None:
            continue
        n = bytes_per_block(model, t.name, "shared")
        if n is None:
            return None
        out.append(SharedBuffer(t.name, n, bool(enclosing_loops(model, p.stmt))))
    return out


def shared_memory_bytes(model: Model) -> int | None:
    """Shared memory per block: loop-invariant tiles once, tiles loaded in the loop × stages.

    For attention: Q tile + stages × (K tile + V tile), in the input dtype.
    """
    parts = shared_memory_breakdown(model)
    if parts is None:
        return None
    s = stages(model)
    return sum(b.bytes * (s if b.staged else 1) for b in parts)


# ---- registers -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegisterEstimate:
    accumulators: int  # fp32 register tiles, per thread
    fragments: int  # one MMA k-slice of the A and B operands of the widest GEMM, per thread
    threads: int

    @property
    def total(self) -> int:
        return self.accumulators + self.fragments


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def register_estimate(model: Model) -> RegisterEstimate | None:
    """32-bit registers per thread for the fp32 accumulators plus the operand fragments in flight.

    Accumulators (acc_s, acc_o: tensors allocated or computed in registers) are spread over all threads:
    (BM·BN + BM·d_v) / (32·warps). Operands are loaded one MMA k-slice at a time (ldmatrix), so a GEMM
    holds (BM / warps)·k A elements and N·k B elements per warp; the widest GEMM counts. Address
    arithmetic and softmax statistics are not counted: treat the number as a lower bound.
    """
    n_threads = threads(model)
    acc_elems = 0
    for t in model.tensors.values():
        if not is_accumulator(model, t.name):
            continue
        p = t.placements["register"]
        if p.tile is None and isinstance(p.stmt, ast.ComputeStmt):
            continue  # a Compute result without an Allocate (a row statistic, a P tile): not counted
        n = tile_elements(model, p.tile)
        if n is None:
            return None  # an allocated accumulator of unknown size (a sketch)
        acc_elems += n
    mma = model.target.mma.get(model.dtype)
    in_bytes = gpu.DTYPE_BYTES.get(model.dtype, 2)
    w = warps(model)
    frag_regs = 0
    if mma is not None:
        for stmt in model.statements:
            if not (isinstance(stmt, ast.ComputeStmt) and stmt.op and (spec := lookup_op(stmt.op.name))
                    and spec.name == "GEMM" and len(stmt.args) == 2):
                continue
            a, b = (_register_tile(model, e) for e in stmt.args)
            if a is None or b is None or len(a) != 2 or len(b) != 2:
                continue
            rows = a[0] // w if a[0] is not None else None
            n_dim = b[0] if a[1] == b[1] and a[1] != b[0] else b[1]
            if rows is None or n_dim is None:
                continue
            per_warp_bytes = (rows + n_dim) * mma.k * in_bytes
            frag_regs = max(frag_regs, _ceil_div(per_warp_bytes, 4 * model.target.warp_size))
    return RegisterEstimate(_ceil_div(acc_elems, n_threads), frag_regs, n_threads)


def _register_tile(model: Model, e: ast.Expr) -> list[int | None] | None:
    if not isinstance(e, ast.Name):
        return None
    t = model.tensors.get(e.name)
    if t is None:
        return None
    p = t.placements.get("register") or t.placements.get("shared")
    return model.shape_values(p.tile) if p else None


def registers_per_thread(model: Model) -> int | None:
    est = register_estimate(model)
    return None if est is None else est.total
