"""Resource facts of a kernel: tile parameters, head dims, shared memory and register estimates.

One place for the numbers the checker (TL301–TL307), hover, the translator and the planner all need, so
they never disagree. Each function returns None where the document leaves a size unknown (a `?` hole,
a symbolic tile).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tl_language import gpu
from tl_language import syntax as ast
from tl_language.facts import enclosing_loops
from tl_language.inference import PARAM_DOCS, inference_of
from tl_language.model import Model
from tl_language.ops import op as lookup_op

DEFAULT_WARPS = 4  # FlashAttention 2's warps up to head dim 128 (see `default_warps`)
WARP_CHOICES = (1, 2, 4, 8, 16)

# Parameters with a meaning the toolchain knows (hover shows these; the checker validates them).
SPECIAL_PARAMS: dict[str, str] = {
    "BM": "query rows per thread block (the M tile of both GEMMs)",
    "BN": "key/value rows per loop iteration (the N tile of Q·Kᵀ, the K tile of P·V)",
    "d": "head dimension of Q, K and V (when QK and V head dims are equal)",
    "d_qk": "head dimension of Q and K (the reduction dimension of Q·Kᵀ)",
    "d_v": "head dimension of V and O (the N dimension of P·V)",
    "warps": (
        "warps per thread block; each warp owns BM / warps query rows (default 4, 8 above head dim 128 "
        "with BM ≥ 128). On sm_90 the wgmma kernel ignores it: see `consumers`"
    ),
    "stages": (
        "shared-memory buffers for the K/V pipeline (default: 2 on sm_90 and with cp.async up to head "
        "dim 64 or causal up to 128, else 1). On sm_90: the depth of the TMA ring of K and V buffers "
        "(1–4), each guarded by full/empty mbarriers"
    ),
    "group": "query heads per key/value head (GQA); heads / heads_kv",
    "heads_kv": "number of key/value heads (1 for MQA)",
    "consumers": (
        "sm_90: consumer warp groups, each owning BM / consumers query rows (a multiple of 64) and "
        "running the wgmma GEMMs and the softmax; one more producer warp group issues the TMA loads "
        "(default BM / 64, at most 3)"
    ),
    "overlap": (
        "sm_90, 0 or 1: intra-warp-group pipelining — Q·Kᵀ of the next key block is issued together "
        "with P·V of this one, so the softmax runs while the tensor cores work (default 1)"
    ),
    "pingpong": (
        "sm_90, 0 or 1: the consumer warp groups take turns issuing their GEMMs (FlashAttention 3's "
        "ping-pong; with three groups the turn goes round a ring), so one group's softmax hides under "
        "the others' GEMMs; needs two or three consumers and overlap (default 1 up to head dim 128)"
    ),
    "persistent": (
        "sm_90, 0 or 1: one thread block per SM walks the query tiles in turn, so the producer loads "
        "the next tile's K, V and Q while the consumers still write this tile's O (default 0: one block "
        "per tile measured as fast on the H200, and faster with a causal mask)"
    ),
    "fma_exps": (
        "sm_90, 0–8: of every eight exp2s a score costs (the softmax's and those inside tanh, sigmoid, "
        "exp), how many run as a polynomial on the FP32 pipe instead of the SFU (default: the planner's "
        "balance of the SFU against the issue slots, 0 while the SFU hides under the tensor cores; the "
        "plain kernel keeps 0)"
    ),
    "fast_tanh": (
        "0 or 1: tanh (and sigmoid, as 1/2 + tanh(x/2)/2) on the SFU's tanh.approx.f32, one instruction "
        "with a relative error up to 2^-11, as FlashAttention 3 and 4 compute softcap; the forward and "
        "the derived backward use it alike, and the verification measures it against the exact reference; "
        "a sigmoid below about 2^-11 then rounds to 0, so its relative accuracy there is lost "
        "(default 0: tanh from one exp2 and a fast division, a few ulp of float32)"
    ),
    **PARAM_DOCS,  # splits, page_size, pack_gqa, varlen (tl_language/inference.py)
}


def wgmma_kernel(model: Model) -> bool:
    """The document builds the sm_90 warp-specialised wgmma kernel; inference kernels (split-KV, paged,
    varlen) build the mma.sync kernel on every target, sm_90 included."""
    return model.target.wgmma and inference_of(model) is None


# ---- defaults: the one table the checker, the translator and the planner read ---------------------------
# Each applies when a TL file leaves the Param out; the examples set every Param, so these only decide
# for hand-written files and for sketches.


def _target(target: gpu.Target | str) -> gpu.Target:
    if isinstance(target, gpu.Target):
        return target
    return gpu.target(target) or gpu.TARGETS[gpu.DEFAULT_TARGET]


def default_warps(target: gpu.Target | str, block_m: int | None, head_dim: int | None) -> int:
    """FlashAttention 2's choice (`flash_fwd_launch_template.h`): 8 warps above head dim 128 when
    BM ≥ 128, else 4. (The sm_90 wgmma kernel ignores warps; the value keeps estimates defined.)"""
    _target(target)
    if head_dim is not None and head_dim > 128 and block_m is not None and block_m >= 128:
        return 8
    return DEFAULT_WARPS


def default_stages(target: gpu.Target | str, head_dim: int | None = None, mask: str = "none") -> int:
    """K/V buffers: 2 on sm_90 (FlashAttention 3's TMA ring); with cp.async 2 up to head dim 64 and for
    causal masks up to 128 (measured on the H200, docs/translation.md), else 1; without cp.async 1."""
    t = _target(target)
    if t.tma:
        return 2
    if not t.cp_async:
        return 1
    if head_dim is None or head_dim <= 64 or (head_dim <= 128 and mask == "causal"):
        return 2
    return 1


# ---- sm_90 (the warp-specialised wgmma kernel): its facts, shared by the checker and the sm_90 backend --

HOPPER_WGMMA_M = 64  # rows of one wgmma; a consumer warp group owns a multiple of this
HOPPER_MAX_CONSUMERS = 3
HOPPER_SMEM_ALIGN = 1024  # the kernel rounds its dynamic shared-memory base up to 1 KB (128-byte swizzle)
# The compiled kernel also holds 1 KB of static shared memory (cuobjdump: SHARED:1024 on the H200 build),
# which counts against the same per-block limit.
HOPPER_STATIC_SMEM = 1024
# setmaxnreg split (producer, consumer) per number of consumer warp groups: at launch every thread gets
# 65536 / threads registers; the producer gives back what the consumers take (docs/hopper.md).
HOPPER_REGISTERS = {1: (24, 240), 2: (24, 240), 3: (24, 160)}
# `Param persistent` when absent: off. On the H200 the persistent grid won 1–3% without a mask while the
# softmax did not overlap P·V; once it did, one block per tile measured the same or better at 8k–16k
# (within the benchmark's run-order noise, docs/performance.md). With a mask it loses outright, even in the
# one-tile grid's longest-first order (1-21 %, docs/results/2026-11-30-h200-sm90-sweeps-night.json): its
# static round robin cannot balance tiles of different lengths as the hardware's block scheduler does.
HOPPER_PERSISTENT = 0


def hopper_tile(head_dim: int, mask: str = "none") -> dict[str, int]:
    """Default sm_90 tile and schedule per head dim, from the H200 measurements in docs/hopper.md:
    d ≤ 64: 192×128, 3 consumers; d ≤ 128: 128×160 (128×128 causal), 2 consumers; 192 (MLA): 128×128;
    256: 128×80, 2 consumers. Ping-pong up to head dim 128, 2 stages, overlap on."""
    causal = mask == "causal"
    if head_dim <= 64:
        # FA4's tile; with the 3-group ping-pong ring it beat 128×128 on 2 groups
        # (docs/results/2026-11-30-h200-sm90-sweeps-evening.json)
        tile = {"BM": 192, "BN": 128, "consumers": 3}
    elif head_dim <= 128:
        # 160 without a mask: the best of 128/144/160/176/192 on the H200
        # (docs/results/2026-11-30-h200-sm90-sweeps.json); a later sweep had 128 ahead by 1-2 % at 4k-8k
        # and level at 16k, inside a call's noise (docs/results/2026-11-30-h200-sm90-sweeps-late.json).
        # 128 with a causal mask, banded ones on top included: sliding window, sink + window and documents
        # ran 4-9 % faster at BN 128 than at 96, 6-15 % than at 64
        # (docs/results/2026-12-01-h200-variants-tile-ab.json)
        tile = {"BM": 128, "BN": 128 if causal else 160, "consumers": 2}
    elif head_dim <= 192:  # MLA-style 192/128: the measured 128×128 tile
        tile = {"BM": 128, "BN": 128, "consumers": 2}
    else:
        tile = {"BM": 128, "BN": 80, "consumers": 2}
    tile["stages"], tile["overlap"] = 2, 1
    tile["pingpong"] = default_pingpong(tile["consumers"], 1, head_dim)
    tile["persistent"] = HOPPER_PERSISTENT
    return tile


def default_consumers(block_m: int | None) -> int:
    """One consumer warp group per 64 query rows (FlashAttention 3's split), at most 3."""
    if block_m is None or block_m <= 0:
        return 2
    return max(1, min(HOPPER_MAX_CONSUMERS, block_m // HOPPER_WGMMA_M))


def default_pingpong(consumers: int, overlap: int, head_dim: int | None) -> int:
    """Ping-pong pays off with two or three consumer groups up to head dim 128 (measured); at 256 it
    does not."""
    return int(consumers in (2, 3) and bool(overlap) and (head_dim is None or head_dim <= 128))


def hopper_barrier_bytes(stages: int) -> int:
    """The sm_90 kernel's mbarriers: Q full and Q empty, and K and V full/empty per stage."""
    return 8 * (2 + 4 * stages)


def hopper_o_own_buffer(
    block_m: int, block_n: int, d_qk: int, d_v: int, stages: int, persistent: bool, element_bytes: int = 2
) -> bool:
    """Whether O is staged in its own shared buffer rather than in Q's. Q's buffer is free once the last
    Q·Kᵀ has read it, so a one-tile kernel reuses it; a persistent kernel gives O its own buffer whenever
    that fits, so the next tile's Q can land while this tile's O is being stored."""
    if d_v > d_qk:
        return True
    if not persistent:
        return False
    own = _hopper_bytes(block_m, block_n, d_qk, d_v, stages, element_bytes, own_o=True)
    return own + HOPPER_STATIC_SMEM <= gpu.TARGETS["sm_90"].smem_per_block


def hopper_shared_bytes(
    block_m: int,
    block_n: int,
    d_qk: int,
    d_v: int,
    stages: int,
    element_bytes: int = 2,
    persistent: bool = False,
) -> int:
    """Dynamic shared memory of the sm_90 kernel: Q, `stages` K and V buffers, O when it has its own
    buffer (`hopper_o_own_buffer`), the mbarriers and the 1 KB alignment pad."""
    own_o = hopper_o_own_buffer(block_m, block_n, d_qk, d_v, stages, persistent, element_bytes)
    return _hopper_bytes(block_m, block_n, d_qk, d_v, stages, element_bytes, own_o=own_o)


def _hopper_bytes(
    block_m: int, block_n: int, d_qk: int, d_v: int, stages: int, element_bytes: int, *, own_o: bool
) -> int:
    q = block_m * d_qk * element_bytes
    kv = stages * block_n * (d_qk + d_v) * element_bytes
    o = block_m * d_v * element_bytes if own_o else 0
    return q + kv + o + hopper_barrier_bytes(stages) + HOPPER_SMEM_ALIGN


def param_value(model: Model, name: str) -> int | None:
    p = model.params.get(name)
    return p.value if p else None


def warps(model: Model) -> int:
    v = param_value(model, "warps")
    if v in WARP_CHOICES:
        return v
    return default_warps(model.target, param_value(model, "BM"), _larger_head_dim(model))


def stages(model: Model) -> int:
    v = param_value(model, "stages")
    if v is not None and v >= 1:
        return v
    return default_stages(model.target, _larger_head_dim(model), model.mask)


def consumers(model: Model) -> int:
    """sm_90: consumer warp groups (`Param consumers`, else one per 64 query rows)."""
    v = param_value(model, "consumers")
    return v if v is not None and v >= 1 else default_consumers(param_value(model, "BM"))


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


def _larger_head_dim(model: Model) -> int | None:
    """The larger of the QK and V head dims that are known (what the tile defaults are keyed on)."""
    dims = [d for d in head_dims(model) if d is not None]
    return max(dims) if dims else None


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
    return sum(b.bytes * (s if b.staged else 1) for b in parts) + shared_memory_overhead(model)


def shared_memory_overhead(model: Model) -> int:
    """Bytes beyond the tiles: on sm_90 the wgmma kernel's mbarriers, its 1 KB alignment pad and its 1 KB of
    static shared memory (as `hopper_shared_bytes` + `HOPPER_STATIC_SMEM`); none on the mma.sync path."""
    if not wgmma_kernel(model):
        return 0
    extra = hopper_barrier_bytes(stages(model)) + HOPPER_SMEM_ALIGN + HOPPER_STATIC_SMEM
    bm, bn = param_value(model, "BM"), param_value(model, "BN")
    d_qk, d_v = head_dims(model)
    persistent = param_value(model, "persistent")
    if persistent is None:
        persistent = HOPPER_PERSISTENT
    if bm is None or bn is None or d_qk is None or d_v is None:
        return extra
    elem = gpu.DTYPE_BYTES.get(model.dtype, 2)
    if hopper_o_own_buffer(bm, bn, d_qk, d_v, stages(model), bool(persistent), elem):
        extra += bm * d_v * elem  # O's own staging buffer (see `hopper_o_own_buffer`)
    return extra


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
    hopper = wgmma_kernel(model)
    n_threads = 128 * consumers(model) if hopper else threads(model)
    acc_elems = 0
    p_elems = 0  # the score tile, reused as the 16-bit A operand of P·V on sm_90
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
        if p_elems == 0 and _feeds_gemm_as_a(model, t.name):
            p_elems = n
    if hopper:
        # wgmma reads Q and K (and V) straight from shared memory: the only operand in registers is P,
        # two 16-bit elements per register.
        frag = _ceil_div(p_elems * gpu.DTYPE_BYTES.get(model.dtype, 2), 4 * n_threads)
        return RegisterEstimate(_ceil_div(acc_elems, n_threads), frag, n_threads)
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


def _feeds_gemm_as_a(model: Model, name: str) -> bool:
    """`name` is the first operand of a GEMM (the S → P tile of P·V)."""
    for stmt in model.statements:
        if (isinstance(stmt, ast.ComputeStmt) and stmt.op and (spec := lookup_op(stmt.op.name))
                and spec.name == "GEMM" and stmt.args and isinstance(stmt.args[0], ast.Name)
                and stmt.args[0].name == name):
            return True
    return False


def register_limit(model: Model) -> int:
    """Registers a thread may use: the target's limit, or on sm_90 what `setmaxnreg` gives a consumer."""
    if wgmma_kernel(model):
        return HOPPER_REGISTERS.get(consumers(model), HOPPER_REGISTERS[HOPPER_MAX_CONSUMERS])[1]
    return model.target.regs_per_thread


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


# ---- what the generated kernels take: one statement of the translator's limits --------------------------
# `translator/plan.py` (`_check_supported`, `_check_hopper`) and `translator/backends/sm90/config.py`
# (`_check`) refuse some numbers with TL501. The checker states the same rules here, on the same numbers
# (`KernelNumbers` mirrors the plan's fields and their defaults), so `tl check` reports them with a code of
# its own; tests/translator/test_check_build_agreement.py keeps the two in step.

# Input dtypes the kernels are built for: mma.sync's and wgmma's 16-bit paths (fp8 is TL305 on every target).
KERNEL_DTYPES = ("fp16", "bf16")
MMA_SYNC_STAGES = (1, 2)  # FA2's single K/V buffer, or K double-buffered
HOPPER_STAGES = (1, 4)  # the K/V mbarrier ring: 1 to 4 stages
HOPPER_BOX_COLS = 64  # one 128-byte TMA box / swizzle atom row of 16-bit elements: head dims in whole boxes


def copy_threads_per_row(head_dim: int) -> int:
    """Threads that copy one row of a shared-memory atom: 64-element (128-byte) atoms when the head
    dimension allows, else 32-element ones; each thread moves 8 elements (16 bytes). (The mma.sync
    backend's copy layout, as `translator.plan.copy_threads_per_row`.)"""
    return 8 if head_dim % 64 == 0 else 4


@dataclass(frozen=True, slots=True)
class KernelNumbers:
    """The numbers a kernel is built from, with the defaults the translator applies to absent Params."""

    arch: str
    wgmma: bool  # the sm_90 warp-specialised kernel, else the mma.sync family
    dtype: str
    block_m: int  # the Q tile's rows
    block_n: int  # the K tile's rows
    d_qk: int  # the Q tile's columns
    d_v: int  # the V tile's columns
    warps: int
    stages: int
    consumers: int
    overlap: bool
    pingpong: bool
    group: int  # 0: from the launch
    heads_kv: int  # 0: from the launch

    @property
    def threads(self) -> int:
        return 32 * self.warps


@dataclass(frozen=True, slots=True)
class KernelLimit:
    """A number the kernels cannot take: the checker's code, what sets the number (Params or the tiles
    "q_rows", "k_rows", "v_rows", "o_rows", "q_cols", "v_cols"; the most specific first) and why."""

    code: str
    keys: tuple[str, ...]
    message: str


def kernel_numbers(model: Model, block_m: int, block_n: int, d_qk: int, d_v: int) -> KernelNumbers | None:
    """The plan's numbers for tiles `block_m × block_n`, head dims `d_qk`/`d_v`: each Param as written, an
    absent one at the translator's default; None when a Param has no value (a hole or an invalid value:
    TL450/TL307 say so)."""
    target = model.target
    d = max(d_qk, d_v)

    def value(name: str, default: int) -> int | None:
        p = model.params.get(name)
        return default if p is None else p.value

    warps = value("warps", default_warps(target, block_m, d))
    stages = value("stages", default_stages(target, d, model.mask))
    consumers = value("consumers", default_consumers(block_m))
    overlap = value("overlap", 1)
    if consumers is None or overlap is None:
        return None
    pingpong = value("pingpong", default_pingpong(consumers, overlap, d))
    group, heads_kv = value("group", 0), value("heads_kv", 0)
    if warps is None or stages is None or pingpong is None or group is None or heads_kv is None:
        return None
    return KernelNumbers(
        arch=target.arch,
        wgmma=wgmma_kernel(model),
        dtype=model.dtype,
        block_m=block_m,
        block_n=block_n,
        d_qk=d_qk,
        d_v=d_v,
        warps=warps,
        stages=stages,
        consumers=consumers,
        overlap=bool(overlap),
        pingpong=bool(pingpong),
        group=group,
        heads_kv=heads_kv,
    )


def kernel_limits(n: KernelNumbers) -> list[KernelLimit]:
    """Every rule of the translator's kernels that `n` breaks (empty: the translator takes it)."""
    out: list[KernelLimit] = []

    def add(code: str, keys: tuple[str, ...], message: str) -> None:
        out.append(KernelLimit(code, keys, message))

    if n.group and n.heads_kv:
        add(
            "TL307",
            ("heads_kv", "group"),
            f"group = {n.group} and heads_kv = {n.heads_kv} both say how K/V heads are shared; give one of "
            "them (group: query heads per K/V head; heads_kv: their number)",
        )
    if n.dtype not in KERNEL_DTYPES:
        kind = "sm_90 wgmma" if n.wgmma else f"{n.arch} mma.sync"
        add(
            "TL305",
            ("dtype",),
            f"Dtype {n.dtype} has no {kind} kernel here: the kernels are built for fp16 and bf16 (bf16 from "
            "sm_80)",
        )
    (_hopper_limits if n.wgmma else _mma_sync_limits)(n, add)
    return out


_Add = Callable[[str, tuple[str, ...], str], None]


def _mma_sync_limits(n: KernelNumbers, add: _Add) -> None:
    if n.warps not in WARP_CHOICES:
        add("TL307", ("warps",), f"warps = {n.warps}; expected one of 1, 2, 4, 8 or 16")
    elif n.block_m % (16 * n.warps):
        add(
            "TL301",
            ("q_rows", "BM"),
            f"BM = {n.block_m} does not give each of the {n.warps} warps whole 16-row MMA tiles; use a "
            f"multiple of {16 * n.warps} or fewer warps",
        )
    if n.block_n % 16 or n.block_n < 16:
        add(
            "TL301",
            ("k_rows", "BN"),
            f"BN = {n.block_n}: the {n.arch} kernels take key tiles in multiples of 16 rows (the N of Q·Kᵀ "
            "and the K of P·V)",
        )
    for d, what, keys in ((n.d_qk, "d_qk", ("q_cols", "d_qk", "d")), (n.d_v, "d_v", ("v_cols", "d_v", "d"))):
        if d % 32 or d > 256:
            add(
                "TL302",
                keys,
                f"{what} = {d}: the {n.arch} kernels take head dimensions in multiples of 32 up to 256 (the "
                "MMA's K and 128-byte swizzled rows)",
            )
    if n.stages not in MMA_SYNC_STAGES:
        add(
            "TL307",
            ("stages",),
            f"stages = {n.stages}: the {n.arch} kernels take 1 (one K/V buffer, FA2's) or 2 (K "
            "double-buffered)",
        )
    if n.warps not in WARP_CHOICES:
        return
    # The copy layout: each row is split among copy_threads_per_row(d) threads of 16 bytes, so a tile's
    # rows are a whole number of the rows one pass of the block's threads covers.
    tiles = (
        (n.d_qk, n.block_m, "q_rows"),
        (n.d_qk, n.block_n, "k_rows"),
        (n.d_v, n.block_n, "v_rows"),
        (n.d_v, n.block_m, "o_rows"),
    )
    for d, rows, key in tiles:
        per_pass = n.threads // copy_threads_per_row(d)
        if rows % per_pass:
            add(
                "TL306",
                (key,),
                f"a ({rows}, {d}) tile cannot be split evenly among {n.threads} threads copying 16 bytes "
                f"each ({per_pass} rows per pass); use a multiple of {per_pass} rows or fewer warps",
            )


def _hopper_limits(n: KernelNumbers, add: _Add) -> None:
    if not 1 <= n.consumers <= HOPPER_MAX_CONSUMERS:
        add(
            "TL307",
            ("consumers", "BM"),
            f"consumers = {n.consumers}: the sm_90 kernels use 1 to {HOPPER_MAX_CONSUMERS} consumer warp "
            "groups",
        )
    elif n.block_m % n.consumers or (n.block_m // n.consumers) % HOPPER_WGMMA_M:
        add(
            "TL301",
            ("q_rows", "BM"),
            f"BM = {n.block_m} over {n.consumers} consumer warp group(s) leaves {n.block_m / n.consumers:g} "
            f"rows each; wgmma needs a multiple of {HOPPER_WGMMA_M} rows per warp group (set BM or "
            "`Param consumers`)",
        )
    if n.block_n % 16 or not 16 <= n.block_n <= 256:
        add(
            "TL301",
            ("k_rows", "BN"),
            f"BN = {n.block_n}: on sm_90 the key tile is the wgmma N of Q·Kᵀ and the K of P·V: a multiple "
            "of 16 from 16 to 256",
        )
    for d, what, keys in ((n.d_qk, "d_qk", ("q_cols", "d_qk", "d")), (n.d_v, "d_v", ("v_cols", "d_v", "d"))):
        if d % HOPPER_BOX_COLS or not HOPPER_BOX_COLS <= d <= 256:
            add(
                "TL302",
                keys,
                f"{what} = {d}: the sm_90 kernel moves tiles in 128-byte TMA boxes of {HOPPER_BOX_COLS} "
                "columns, so its head dims are 64, 128, 192 or 256",
            )
    if n.pingpong and (n.consumers < 2 or not n.overlap):
        add(
            "TL307",
            ("pingpong", "consumers", "overlap"),
            "pingpong = 1 passes the GEMM turn between two or three consumer warp groups of the overlapped "
            f"loop (here consumers = {n.consumers}, overlap = {int(n.overlap)}); set pingpong = 0",
        )
    if not HOPPER_STAGES[0] <= n.stages <= HOPPER_STAGES[1]:
        add(
            "TL307",
            ("stages",),
            f"stages = {n.stages}: the sm_90 K/V mbarrier pipeline takes 1 to 4 stages (2 is "
            "FlashAttention 3's)",
        )
    if n.d_v > n.d_qk:
        add(
            "TL302",
            ("v_cols", "d_v"),
            f"d_v = {n.d_v} > d_qk = {n.d_qk}: the sm_90 kernel stages O in Q's shared buffer for its TMA "
            "store, so d_v must not exceed d_qk",
        )
