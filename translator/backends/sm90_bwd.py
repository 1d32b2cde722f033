# ruff: noqa: E501  (generated C++ lines are kept whole, so each reads as one statement)
"""The backward's dQ/dK/dV kernel on wgmma (sm_90a), FlashAttention-3's dataflow: the default backward of
a `Target sm_90` program with head dim 64, 128 or 256 (`translate_backward`'s "auto"; forced with
`skeleton="sm90"`, `tl build --backward --backward-skeleton sm90`). Verified and timed on the H200:
docs/results/2026-12-04-h200-backward-kv-tma-verify.log, -kv-tma-ab.json (this kernel),
-backward-tma-fa4.json (beside FA4 and cuDNN); earlier forms of it in docs/performance.md.

One thread block per (key block of kBlockN = 128 rows, batch, K/V head), two consumer warp groups of 128
threads, each owning 64 key rows; K and V stay in shared memory while the block walks the query blocks
(kBlockM = 64 rows) of every query head of the GQA group:

    Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ          SS wgmma, (kBlockN, kBlockM), warp group g: key rows 64g …
    Pᵀ = exp2(Sᵀ·log2 e − LSE·log2 e), dSᵀ = Pᵀ ∘ (dPᵀ − D) · dX/ds   (the score region, as sm80_bwd)
    dV += Pᵀ·dO, dK += dSᵀ·Q        RS wgmma: Pᵀ and dSᵀ are the warp group's own accumulator rows
    dSᵀ → shared memory, dQ = dS·K   SS wgmma, (kBlockM, kHeadDim), warp group g: columns d/2 · g …
    dQ → dq_accum                    d = 128: each warp group's part through shared memory, added by one
                                     bulk reduction of the producer's last warp (`dq_bulk`); d = 64: float4
                                     atomics; in the dQ MMA's fragment order, a part per warp group

At d = 256 (`split_head`, FA3's d 256 tile; docs/results/2026-12-04-h200-backward-d256-split-*) the
warp groups split other dimensions: a thread block takes kBlockN = 64 key rows, which both share; warp
group g computes Sᵀ and dPᵀ for query columns 32g … (64 × 32), writes Pᵀ and dSᵀ to shared memory, and
after one barrier computes dV, dQ and dK for head-dim columns 128g … as SS wgmma (Pᵀ and dSᵀ MN-major).

Loads (FA3's warp specialisation): a third warp group, the producer (`setmaxnreg.dec`), fills
two stages; one lane issues each query block's Q and dO as TMA loads into the GMMA-swizzled layouts (the
stage's full mbarrier counts their bytes), and its warp's lanes copy the rows' LSE and D by cp.async,
each lane's copies arriving on the same mbarrier as they land, so no producer thread waits for a load.
The consumers (`setmaxnreg.inc`) wait on it and release the stage through its empty mbarrier, and meet
each other at one named barrier a block (dS, double-buffered, between the warp groups). K and V: TMA by
the same lane once per key block, behind their own full and empty mbarriers (the consumers release them
after the key block's last wgmma, so a deterministic grid column's next key block can load). dSᵀ
reaches shared memory by stmatrix; dK and dV leave in 32-bit pairs. The other kernels (`_bwd_dot_do_o`,
`_bwd_convert_dq`, `_bwd_row_grads`) are sm80_bwd's, at 256 threads.
The grid runs key block column first where the work per key block is uneven (`uneven_key_blocks`). The
block classification, the score rows, the learnable side tensors' gradients and the deterministic dQ
are sm80_bwd's emitters.

`overlap_p` (opt-in, the A/B variant `benchmarks/backward_verify.py --skeleton sm90ovl` builds): wait for
Sᵀ alone (`warpgroup_wait<1>`), compute Pᵀ into acc_s while dPᵀ's wgmma runs, then wait for dPᵀ and
compute dSᵀ from the Pᵀ left in acc_s (FA3's order); for programs whose dSᵀ does not read the raw score.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

from kernel_ir import grad
from kernel_ir.expr import Expr, Load
from runner.abi import (
    BACKWARD_PARAMS,
    BACKWARD_TMA_ABI,
    BACKWARD_TMA_PARAMS,
    BackwardSpec,
    backward_tma_box_cols,
)
from tl_language import gpu
from translator.backends import sm80_bwd as fa2
from translator.backends.arch import ELEMENT
from translator.backends.regions import Regions
from translator.backends.sm90.fragments import (
    SWIZZLE_BYTES,
    Operand,
    acc_layout,
    coord_layout,
    k_major_operand,
    mn_major_operand,
)
from translator.backends.sm90.gmma import WGMMA_M, GmmaAtom, atom_definitions, atom_n
from translator.backends.sm90.helpers import emit_helpers
from translator.backends.sm90.tma import emit_tma_tiles
from translator.errors import TranslateError, unsupported
from translator.plan import KernelPlan
from translator.planner.masks import Masks, key_block_spread
from translator.writer import CodeWriter

NVRTC_ARCH = "sm_90a"  # wgmma exists only on the arch-specific target
BLOCK_M = 64  # query rows per step unless told: FA3's d ≤ 128 tile, every program here
# FA3's non-causal d = 128 tile (opt-in, 0.92-0.97x BLOCK_M on the H200, docs/performance.md): dQ's M
# (80 rows) is no whole number of warp groups, so dQ is computed transposed, dQᵀ = Kᵀ·dSᵀ, warp group g
# owning head-dim rows 64g … (`swapped_dq`)
BLOCK_M_WIDE = 80
# FA3's d = 64 tile (`default_block_m`): two warp groups' 64 query rows each in dQ's GEMM (`split_dq_rows`); the
# accumulators of Sᵀ and dPᵀ double, which only d = 64's smaller dK and dV leave registers for
BLOCK_M_TALL = 128
BLOCK_MS = (BLOCK_M, BLOCK_M_WIDE, BLOCK_M_TALL)
# the head dim each other tile needs, and why (`_check`)
TILE_HEAD_DIMS = {
    BLOCK_M_WIDE: (128, "computes dQ transposed, whose M is the head dim (two warp groups of 64 rows)"),
    BLOCK_M_TALL: (64, "doubles Sᵀ's and dPᵀ's accumulators (registers)"),
}
BLOCK_N = 128  # key rows of a thread block: two warp groups of 64
# FA3's d = 256 split (`split_head`): 64 key rows a thread block, which both warp groups share; each
# computes Sᵀ and dPᵀ for half of the query columns, and dK and dV for half of the head dim (dK's and
# dV's 64 × 256 accumulators on one warp group would take 256 registers a thread), so Pᵀ joins dSᵀ in
# shared memory and dK, dV are SS wgmma
BLOCK_N_SPLIT = 64
THREADS = fa2.THREADS  # two consumer warp groups: the other kernels keep sm80_bwd's 256 threads
HEAD_DIMS = (64, 128, 256)
SPLIT_HEAD_DIMS = (256,)
DQ_VECTOR = 4  # dQ's fp32 additions as float4 reductions (sm_90): a quarter of the atomic instructions
# dq_accum's tile in one contiguous part per consumer warp group (`sm80_bwd._emit_convert`), so each warp
# group hands its own part to dq_bulk's bulk add without waiting for the other
DQ_GROUPS = 2
WG_THREADS = 128
PRODUCER_THREADS = 128  # the producer warp group: K, V, Q, dO and the rows' LSE and D
PRODUCER_REGS, CONSUMER_REGS = 24, 240  # setmaxnreg: 128 · 24 + 256 · 240 ≤ 64k registers
ROW_LANES = 32  # the producer's lanes that copy the rows' LSE and D (cp.async), two rows each
# key-major above this spread (`translator.planner.masks.key_block_spread` at 8k, the Scalars' defaults):
# causal is 2, sink tokens + window 6.9
SPREAD_KEY_MAJOR = 3.0
SPREAD_SEQLEN = 8192
CONSUMER_SYNC = "tl::consumer_sync(1, Traits::kNThreads);"  # the consumer warp groups' named barrier
STSM_INCLUDE = "#include <cute/arch/copy_sm90.hpp>      // stmatrix (dS)"
WS_INCLUDES = (
    "#include <cute/arch/copy_sm90_tma.hpp>  // TMA loads of Q and dO",
    "#include <cutlass/arch/barrier.h>       // mbarriers with transaction counts",
    "#include <cutlass/arch/reg_reconfig.h>  // setmaxnreg",
)


def split_head(head_dim: int) -> bool:
    """Whether the warp groups split Sᵀ's query columns and dK's and dV's head dim rather than the key
    rows (FA3's d = 256 tile, `BLOCK_N_SPLIT`)."""
    return head_dim in SPLIT_HEAD_DIMS


def block_n(head_dim: int) -> int:
    """Key rows of a thread block at `head_dim`."""
    return BLOCK_N_SPLIT if split_head(head_dim) else BLOCK_N


def shared_bytes(head_dim: int, dtype_bytes: int = 2, *, block_m: int = BLOCK_M, dq_bulk: bool = False) -> int:
    """K, V, dS (double-buffered; with `split_head` Pᵀ too) and two stages of (Q, dO) in the input dtype,
    two stages of the rows' LSE and D (fp32), six mbarriers (the stages' and K/V's full and empty), and
    1024 bytes to round the base up to the swizzle's period; `dq_bulk`: dQ's fp32 tile."""
    n = block_n(head_dim)
    ds = 2 * block_m * n * (2 if split_head(head_dim) else 1)
    elems = 2 * n * head_dim + ds + 2 * 2 * block_m * head_dim
    dq = block_m * head_dim * 4 if dq_bulk else 0
    return dtype_bytes * elems + 2 * 2 * block_m * 4 + dq + 6 * 8 + 1024


def swapped_dq(block_m: int) -> bool:
    """Whether dQ is computed transposed (dQᵀ = Kᵀ·dSᵀ, FA3's dQ_swapAB): where the query tile is no whole
    number of warp groups' 64 rows, the head dim takes the wgmma's M."""
    return block_m % WGMMA_M != 0


def split_dq_rows(block_m: int) -> bool:
    """Whether dQ's warp groups split the query rows (a tile of two warp groups' 64 rows, FA3's
    AtomLayoutMdQ = 2) rather than the head dim's columns (64 rows: each warp group all of them)."""
    return block_m == 2 * WGMMA_M


def atoms(dtype: str, head_dim: int, block_m: int = BLOCK_M) -> dict[str, GmmaAtom]:
    """The three wgmma atoms: Sᵀ / dPᵀ (SS, both K-major), dV / dK (RS, Q and dO MN-major), dQ (SS, Kᵀ
    MN-major, each warp group half of the head dim, or all of it where the warp groups split the rows;
    swapped: Kᵀ as the MN-major A, dS as the K-major B, each warp group 64 of the head dim's rows)."""
    if swapped_dq(block_m):
        dq = GmmaAtom(atom_n(block_m), "SS", dtype, "K", major_a="MN")
    else:
        dq = GmmaAtom(atom_n(head_dim if split_dq_rows(block_m) else head_dim // 2), "SS", dtype, "MN")
    if split_head(head_dim):  # each warp group half of Sᵀ's columns and of dK's and dV's; Pᵀ, dSᵀ from smem
        return {
            "SdP": GmmaAtom(atom_n(block_m // 2), "SS", dtype, "K"),
            "dKV": GmmaAtom(atom_n(head_dim // 2), "SS", dtype, "MN", major_a="MN"),
            "dQ": dq,
        }
    return {
        "SdP": GmmaAtom(atom_n(block_m), "SS", dtype, "K"),
        "dKV": GmmaAtom(atom_n(head_dim), "RS", dtype, "MN"),
        "dQ": dq,
    }


def default_dq_bulk(plan: KernelPlan) -> bool:
    """Whether dQ goes through shared memory and a bulk add unless told (`dq_bulk`): at d = 128, where the
    H200 measured it 1.03-1.05x non-causal and 1.00-1.02x causal; at d = 64 0.95-1.02x
    (docs/results/2026-12-04-h200-backward-dqwg-*)."""
    return plan.head_dim_qk == 128


def default_block_m(plan: KernelPlan, learnable: tuple[str, ...] = ()) -> int:
    """The query tile unless told (`block_m`): FA3's 128 rows at d = 64 where the score is the scaled dot
    product under a softmax, unmasked or masked by bounds on kv_idx − q_idx (plain, causal, windows), where
    the H200 measured it 1.04-1.06x non-causal and 1.02-1.04x causal against 64 rows
    (docs/results/2026-12-04-h200-backward-tiles-*); 64 rows elsewhere (a score region's temporaries
    beside Sᵀ's and dPᵀ's doubled accumulators: not measured)."""
    reg = Regions(plan.ir)
    plain = not learnable and reg.fold is not None and (not reg.has_masks or reg.diagonal is not None)
    return BLOCK_M_TALL if plan.head_dim_qk == 64 and plain else BLOCK_M


def atom_cols(extent: int) -> int:
    """The row, in 16-bit elements, of the widest K-major GMMA swizzle atom (64, 32 or 16) that divides
    `extent`: a warp group's MN-major slice of the same buffer must be whole atoms."""
    for width in SWIZZLE_BYTES:
        if extent % width == 0:
            return width
    raise ValueError(f"no GMMA swizzle atom divides {extent}")


def smem_atom(extent: int) -> str:
    """CuTe's name of the atom `atom_cols(extent)` picks."""
    return f"GMMA::Layout_K_SW{SWIZZLE_BYTES[atom_cols(extent)]}_Atom<Element>"


def generate_backward_sm90(
    plan: KernelPlan,
    *,
    learnable: tuple[str, ...] = (),
    tl_file: str | None = None,
    deterministic: bool = False,
    overlap_p: bool = False,
    key_major: bool | None = None,
    dq_bulk: bool | None = None,
    heavy_columns: int = 0,
    block_m: int | None = None,
    head_sections: bool = False,
) -> tuple[str, BackwardSpec]:
    """The backward's .cu source (dQ/dK/dV on wgmma, the other kernels sm80_bwd's) and its launch spec
    (arch sm_90a). Raises TranslateError for what it cannot derive or this skeleton does not cover. The
    kernel is FlashAttention-3's warp specialisation (the module's docstring): a producer warp group
    (`setmaxnreg.dec`) loads K and V once per key block and Q and dO per query block by TMA, and the rows'
    LSE and D by cp.async, behind full and empty mbarriers, so the consumers (`setmaxnreg.inc`) never wait
    on their own loads nor meet the whole thread block at a barrier; it takes the TMA descriptors of Q,
    dO, K and V (`runner.abi.BACKWARD_TMA_PARAMS`). Opt-in A/B variants (docs/performance.md):
    `overlap_p` waits for Sᵀ alone and computes Pᵀ while dPᵀ's wgmma still runs (FlashAttention-3's
    order), only for programs whose dX/ds, masks and partials do not read the raw score, which Pᵀ
    overwrites (softcap's 1 − tanh² does): TranslateError otherwise, never a silent fallback, so an A/B
    timing cannot compare the default with itself. `key_major`: the grid taken key block column first
    (`sm80_bwd._emit_block_indices`); None: where `uneven_key_blocks` says so, off with `heavy_columns`.
    `heavy_columns` (not with `key_major`; not yet run on a GPU): only the first that many key columns
    of every head first. `head_sections` (implies `key_major`; refused with `key_major=False` or
    `heavy_columns`): key column first within sections of heads that fit in L2
    (`sm80_bwd.L2_SECTION_BYTES`). `dq_bulk`: FA3's dQ path, each consumer warp group stores its part of
    dQ's tile in shared memory and the producer's last warp adds it to dq_accum with one bulk reduction
    (`cp.reduce.async.bulk`) instead of each thread's float4 atomics; None: `default_dq_bulk`. `block_m`: the
    query tile, one of BLOCK_MS (None: `default_block_m`); 80 rows compute dQ transposed (`swapped_dq`)
    and need d = 128; 128 rows split dQ's rows between the warp groups (`split_dq_rows`) and need
    d = 64."""
    fa2._check(plan, learnable)
    if block_m is None:
        block_m = default_block_m(plan, learnable)
    if dq_bulk is None:
        dq_bulk = default_dq_bulk(plan)
    _check(plan, block_m)
    if heavy_columns and (key_major or head_sections):
        raise TranslateError(
            [unsupported(plan.range_of("kernel"), "the sm_90 backward: heavy_columns or key_major, not both")]
        )
    if head_sections and key_major is False:
        raise TranslateError(
            [unsupported(plan.range_of("kernel"), "the sm_90 backward: head_sections is a key-major order")]
        )
    if key_major is None:
        key_major = head_sections or (not heavy_columns and uneven_key_blocks(plan, block_m))
    if overlap_p:
        _check_overlap(plan, learnable)
    d = plan.head_dim_qk
    swap_dq = swapped_dq(block_m)
    _check_shared(plan, block_m, dq_bulk, overlap_p)

    def defs(w: CodeWriter) -> None:
        for line in atom_definitions(*atoms(plan.dtype, d, block_m).values()):  # wgmma N outside the base shapes
            w.line(line)
        _emit_traits(w, plan, block_m)
        emit_helpers(w, regions=True, gmma_desc=True)
        w.line()
        _emit_bwd_helpers(w, dq_bulk=dq_bulk)

    return fa2.assemble(
        plan,
        learnable=learnable,
        tl_file=tl_file,
        deterministic=deterministic,
        notes=(
            f"Target {NVRTC_ARCH}, {plan.dtype}, head dim {d}; dQ/dK/dV on wgmma (FlashAttention-3's dataflow),",
            "verified on the H200 against autograd of the IR reference (docs/performance.md).",
        ),
        includes=(STSM_INCLUDE, *WS_INCLUDES),
        emit_defs=defs,
        emit_main=functools.partial(
            _emit_main,
            overlap_p=overlap_p,
            key_major=key_major,
            dq_bulk=dq_bulk,
            heavy_columns=heavy_columns,
            head_sections=head_sections,
            swap_dq=swap_dq,
            ops=operands(d, block_m),
        ),
        line_directives=True,
        block_m=block_m,
        block_n=block_n(d),
        shared_bytes=shared_bytes(d, block_m=block_m, dq_bulk=dq_bulk),
        dq_swapped=swap_dq,
        dq_coords="CoordLayoutdQ",
        main_threads=THREADS + PRODUCER_THREADS,
        main_params=BACKWARD_TMA_PARAMS,
        arch=NVRTC_ARCH,
        dq_vector=DQ_VECTOR,
        dq_groups=DQ_GROUPS,
    )


def uneven_key_blocks(plan: KernelPlan, block_m: int = BLOCK_M) -> bool:
    """Whether the grid goes key block column first: where a few key blocks see most query rows (sink
    tokens: the first key block's thread block of the last heads started late in the head-major grid, a
    tail of one long block), or where the masks read side tensors (documents, a prefix, global tokens:
    unknown here, uneven in general). Key-major costs L2 locality (every head's Q, dO and dQ at once):
    on the H200 it made sink tokens + window 1.54× faster at 16k and documents 1.05-1.08×, sliding window
    0.89-0.94× and causal 0.95-0.96× (docs/performance.md), hence the spread threshold."""
    ir = plan.ir
    if ir.block_mask:
        return True
    if ir.header_mask != "expr" or not ir.masks:
        return False
    masks = Masks(tuple(ir.masks), tuple((s.name, s.default) for s in ir.scalars))
    n = block_n(plan.head_dim_qk)
    return key_block_spread(masks, block_m, n, SPREAD_SEQLEN, SPREAD_SEQLEN) > SPREAD_KEY_MAJOR


def _check(plan: KernelPlan, block_m: int) -> None:
    def fail(why: str, *keys: str) -> TranslateError:
        """Reported on the first TL line of `keys` the plan knows, else on the Kernel line."""
        return TranslateError([unsupported(plan.range_of(*keys, "kernel"), f"the sm_90 backward: {why}")])

    if plan.compute_capability < (9, 0):
        raise fail(f"{plan.arch}: wgmma needs sm_90 (the default backward runs on {plan.arch})", "target")
    if plan.head_dim_qk not in HEAD_DIMS:
        raise fail(
            f"head dim {plan.head_dim_qk}: this skeleton covers {', '.join(map(str, HEAD_DIMS))} "
            "(the default backward covers the others)",
            "d",
            "load_q",
        )
    if block_m not in BLOCK_MS:
        raise fail(f"a query tile of {block_m} rows: this skeleton has {' and '.join(map(str, BLOCK_MS))}")
    need, why = TILE_HEAD_DIMS.get(block_m, (plan.head_dim_qk, ""))
    if plan.head_dim_qk != need:
        raise fail(
            f"a query tile of {block_m} rows {why}: it needs d = {need}, not {plan.head_dim_qk}", "d", "load_q"
        )


def _check_shared(plan: KernelPlan, block_m: int, dq_bulk: bool, overlap_p: bool) -> None:
    """The tiles fit sm_90's shared memory, and `overlap_p` is refused at the head-split tile (its order
    was built and measured for the key-row split only)."""
    d = plan.head_dim_qk
    need = shared_bytes(d, block_m=block_m, dq_bulk=dq_bulk)
    limit = gpu.TARGETS["sm_90"].smem_per_block
    where = plan.range_of("d", "load_q", "kernel")
    if need > limit:
        why = f"head dim {d}{' with dq_bulk' if dq_bulk else ''} needs {need} bytes of shared memory (sm_90: {limit})"
        raise TranslateError([unsupported(where, f"the sm_90 backward: {why}")])
    if overlap_p and split_head(d):
        raise TranslateError([unsupported(where, f"the sm_90 backward: overlap_p at head dim {d} (not built)")])


def _check_overlap(plan: KernelPlan, learnable: tuple[str, ...]) -> None:
    """overlap_p computes Pᵀ in place of Sᵀ before dPᵀ is ready, so dSᵀ's pass has no raw score: refuse
    the programs that would read it there (keeping Sᵀ in a second fragment would cost 32 more registers
    per thread in a kernel already at 255)."""
    ir = plan.ir
    partials = grad.tensor_partials(fa2._score(ir), learnable) if learnable else []
    blockers = fa2.overlap_blockers(ir, partials)
    if blockers:
        where = plan.range_of("score_mod", "mask_expr", "softmax", "kernel")
        why = (
            "the sm_90 backward's overlap_p computes P over the raw score before dP is ready, and dS "
            f"would still read it: {'; '.join(blockers)} (build without overlap_p)"
        )
        raise TranslateError([unsupported(where, why)])


def _emit_traits(w: CodeWriter, plan: KernelPlan, block_m: int) -> None:
    d = plan.head_dim_qk
    softmax = plan.ir.normalizer == "softmax"
    a = atoms(plan.dtype, d, block_m)
    w.comment("Tiles, wgmma atoms and shared-memory layouts of the dQ/dK/dV kernel.")
    with w.block(f"struct {plan.kernel_name}_bwd_traits", "};"):
        w.line(f"using Element = {ELEMENT[plan.dtype]};")
        w.line(f"static constexpr int kBlockM = {block_m};  // query rows per step of the loop")
        w.line(f"static constexpr int kBlockN = {block_n(d)};  // key rows of this thread block")
        w.line(f"static constexpr int kHeadDim = {d};")
        w.line(f"static constexpr int kNThreads = {THREADS};  // two consumer warp groups")
        w.line(f"static constexpr int kProducerThreads = {PRODUCER_THREADS};  // the loads' warp group")
        w.line("static constexpr int kBoxCols = 64;  // a TMA box: 64 columns (128 bytes, the swizzle's span)")
        w.line("static constexpr int kTxQdO = 2 * kBlockM * kHeadDim * int(sizeof(Element));  // a stage's bytes")
        w.line("static constexpr int kTxKV = 2 * kBlockN * kHeadDim * int(sizeof(Element));  // K's and V's")
        w.line(
            f"static constexpr int kBoxColsK = {backward_tma_box_cols('k', d)};  "
            "// K's boxes: its swizzle atom (each warp group's half of the head dim)"
        )
        w.line(
            f"static constexpr int kRowLanes = {ROW_LANES if softmax else 0};  "
            "// lanes whose cp.async of the rows' LSE and D arrive on a stage"
        )
        w.line(f"static constexpr int kProducerRegs = {PRODUCER_REGS};  // setmaxnreg.dec: TMA and a few cp.async need few")
        w.line(f"static constexpr int kConsumerRegs = {CONSUMER_REGS};  // setmaxnreg.inc: the accumulators")
        split = split_head(d)
        w.line(
            f"static constexpr int kWgQueries = {block_m // 2 if split else block_m};  "
            "// Sᵀ's query columns a warp group computes"
        )
        w.line(
            f"static constexpr int kWgCols = {d // 2 if split else d};  // dK's and dV's head-dim columns a warp group owns"
        )
        if split:
            w.comment("Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, (kBlockN, kBlockM): warp group g owns query columns kBlockM / 2 · g …")
            sdp_layout = "_1, _2, _1"
            w.comment("dV += Pᵀ·dO and dK += dSᵀ·Q, (kBlockN, kHeadDim): warp group g owns columns kHeadDim / 2 · g …;")
            w.comment("Pᵀ and dSᵀ from shared memory (both warp groups' columns), MN-major")
        else:
            w.comment("Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, (kBlockN, kBlockM): warp group g owns key rows 64g …")
            sdp_layout = "_2, _1, _1"
            w.comment("dV += Pᵀ·dO and dK += dSᵀ·Q, (kBlockN, kHeadDim): Pᵀ and dSᵀ from the same rows' registers")
        w.line(
            f"using TiledMmaSdP = decltype(make_tiled_mma({a['SdP'].type()}{{}}, Layout<Shape<{sdp_layout}>>{{}}));"
        )
        w.line(
            f"using TiledMmadKV = decltype(make_tiled_mma({a['dKV'].type()}{{}}, Layout<Shape<{sdp_layout}>>{{}}));"
        )
        if swapped_dq(block_m):
            w.comment("dQᵀ = Kᵀ·dSᵀ, (kHeadDim, kBlockM): warp group g owns head-dim rows 64g … (kBlockM is no")
            w.comment("whole number of warp groups' 64 rows)")
            layout = "_2, _1, _1"
        elif split_dq_rows(block_m):
            w.comment("dQ = dS·K, (kBlockM, kHeadDim): warp group g owns query rows 64g …")
            layout = "_2, _1, _1"
        else:
            w.comment("dQ = dS·K, (kBlockM, kHeadDim): warp group g owns columns kHeadDim / 2 · g …")
            layout = "_1, _2, _1"
        w.line(f"using TiledMmadQ = decltype(make_tiled_mma({a['dQ'].type()}{{}}, Layout<Shape<{layout}>>{{}}));")
        _emit_fragment_layouts(w, a, block_m, d, split)
        w.line()
        w.comment("Shared memory, K-major swizzled atoms; the transposed operands are views (no data moves).")
        w.comment("K's atom divides kHeadDim / 2 (each warp group's MN-major slice of Kᵀ in dQ's GEMM).")
        w.line(
            f"using SmemLayoutQdO = decltype(tile_to_shape({smem_atom(d)}{{}}, Shape<Int<kBlockM>, Int<kHeadDim>>{{}}));"
        )
        w.line(
            f"using SmemLayoutK = decltype(tile_to_shape({smem_atom(d // 2)}{{}}, Shape<Int<kBlockN>, Int<kHeadDim>>{{}}));"
        )
        w.line(
            f"using SmemLayoutV = decltype(tile_to_shape({smem_atom(d)}{{}}, Shape<Int<kBlockN>, Int<kHeadDim>>{{}}));"
        )
        w.line(
            f"using SmemLayoutdS = decltype(tile_to_shape({smem_atom(block_n(d))}{{}}, Shape<Int<kBlockM>, Int<kBlockN>>{{}}));"
        )
        views = [("QdOt", "SmemLayoutQdO", "kHeadDim", "kBlockM"), ("Kt", "SmemLayoutK", "kHeadDim", "kBlockN")]
        if split:
            views.append(("dSt", "SmemLayoutdS", "kBlockN", "kBlockM"))  # Pᵀ's too: the same layout
        for t, base, rows, cols in views:
            w.line(
                f"using SmemLayout{t} = decltype(composition({base}{{}}, "
                f"make_layout(Shape<Int<{rows}>, Int<{cols}>>{{}}, Stride<Int<{cols}>, _1>{{}})));"
            )
    w.line()


# A warp group's coordinate along the GEMM's M or N in a TiledMMA's thread layout (its slice `wg_mma_*`)
M_COORD = "get<1>(wg_mma_{}.thr_vmnk_)"
N_COORD = "get<2>(wg_mma_{}.thr_vmnk_)"


def operands(d: int, block_m: int) -> dict[str, Operand]:
    """Each shared-memory wgmma operand as one warp group's GMMA descriptors (`sm90.fragments`), by the
    traits' name: K and V (Sᵀ's and dPᵀ's A), Q and dO (their B), Qᵀ and dOᵀ (dK's and dV's B, MN-major),
    Kᵀ and dS (dQ's), and with `split_head` dSᵀ and Pᵀ (dK's and dV's A, MN-major)."""
    n, split = block_n(d), split_head(d)
    wk, wq, wds = atom_cols(d // 2), atom_cols(d), atom_cols(n)
    out = {
        "K": k_major_operand(n, d, wk, 0 if split else WGMMA_M),
        "V": k_major_operand(n, d, wq, 0 if split else WGMMA_M),
        "QdO": k_major_operand(block_m, d, wq, block_m // 2 if split else 0),
        "QdOt": mn_major_operand(block_m, d, wq, d // 2 if split else 0),
    }
    if swapped_dq(block_m):  # dQᵀ: Kᵀ is A, 64 head-dim rows a warp group; dS is B
        out["Kt"] = mn_major_operand(n, d, wk, WGMMA_M)
        out["dS"] = k_major_operand(block_m, n, wds)
    elif split_dq_rows(block_m):  # each warp group 64 query rows of dS, all of Kᵀ
        out["Kt"] = mn_major_operand(n, d, wk)
        out["dS"] = k_major_operand(block_m, n, wds, WGMMA_M)
    else:  # each warp group half of Kᵀ's columns, all of dS
        out["Kt"] = mn_major_operand(n, d, wk, d // 2)
        out["dS"] = k_major_operand(block_m, n, wds)
    if split:
        out["dSt"] = mn_major_operand(block_m, n, wds)
    return out


def _emit_fragment_layouts(w: CodeWriter, a: dict[str, GmmaAtom], block_m: int, d: int, split: bool) -> None:
    """The accumulators' layouts and Sᵀ's identity partition as the traits' types (what CuTe's
    partition_fragment_C and thrfrg_C derive for the TiledMMAs above; `sm90.fragments`), so the kernel
    does not instantiate that layout algebra."""
    n = block_n(d)
    sdp = (1, 2) if split else (2, 1)  # warp groups along (M, N)
    dq_rows, dq_cols = (d, block_m) if swapped_dq(block_m) else (block_m, d)
    dq = (2, 1) if swapped_dq(block_m) or split_dq_rows(block_m) else (1, 2)
    w.comment("The accumulators, ((2 cols, 2 rows, N / 8), MMA_M, MMA_N) as partition_fragment_C gives a warp")
    w.comment("group's, and Sᵀ's (key, query)s and dQ's as thrfrg_C lays out their identity tensors ((ThrV, (ThrM, ThrN)),")
    w.comment("(FrgV, (RestM, RestN)); ScaledBasis<s, 0> steps keys, <s, 1> queries), sliced by tl::partition_C")
    w.line(f"using AccLayoutSdP = {acc_layout(n, block_m, a['SdP'].n, *sdp)};")
    w.line(f"using AccLayoutdKV = {acc_layout(n, d, a['dKV'].n, *sdp)};")
    w.line(f"using AccLayoutdQ = {acc_layout(dq_rows, dq_cols, a['dQ'].n, *dq)};")
    for name, shape in (("S", (n, block_m, a["SdP"].n, *sdp)), ("dQ", (dq_rows, dq_cols, a["dQ"].n, *dq))):
        first, rest = coord_layout(*shape).split("\n")
        w.line(f"using CoordLayout{name} = {first}")
        w.line(f"{rest};")
    w.comment("The shared-memory operands as one GMMA descriptor each and its (MMA, MMA_M or MMA_N, MMA_K)")
    w.comment("steps in 16-byte units: what partition_fragment_A / _B give a warp group (k16 slices 32 bytes")
    w.comment("apart in a K-major atom's row, then the next column block; 16 rows apart MN-major)")
    for name, op in operands(d, block_m).items():
        w.line(f"using DescLayout{name} = {op.layout};")


def _emit_bwd_helpers(w: CodeWriter, *, dq_bulk: bool = False) -> None:
    with w.block("namespace tl", "}  // namespace tl"):
        w.comment("threadIdx.x read again where it is called (volatile: not merged with an earlier read, so")
        w.comment("what is computed from it is computed there)")
        with w.block("CUTE_DEVICE int thread_index()"):
            w.line("int t;")
            w.line('asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));')
            w.line("return t;")
        w.line()
        w.comment("SM90_U32x4_STSM_N's store at a shared-window address the caller computed")
        with w.block("CUTE_DEVICE void stsm_x4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d)"):
            w.line(
                'asm volatile("stmatrix.sync.aligned.x4.m8n8.shared.b16 [%0], {%1, %2, %3, %4};\\n" '
                ':: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d));'
            )
        w.line()
        w.comment("SM90_U16x8_STSM_T's store at a shared-window address the caller computed")
        with w.block("CUTE_DEVICE void stsm_x4_t(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d)"):
            w.line(
                'asm volatile("stmatrix.sync.aligned.x4.trans.m8n8.shared.b16 [%0], {%1, %2, %3, %4};\\n" '
                ':: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d));'
            )
        w.line()
        w.comment("Sᵀ's accumulator ((2 cols, 2 rows, N/8), MMA_M, MMA_N) seen as (query rows, key columns):")
        w.comment("((2, N/8, MMA_N), (2, MMA_M)), the transpose of acc_rowcol.")
        w.line("template <class Layout>")
        with w.block("CUTE_DEVICE constexpr auto acc_colrow(Layout acc)"):
            w.line('static_assert(decltype(rank<0>(acc))::value == 3, "a wgmma (GMMA) accumulator layout");')
            w.line("return make_layout(make_layout(get<0, 0>(acc), get<0, 2>(acc), get<2>(acc)),")
            w.line("                   make_layout(get<0, 1>(acc), get<1>(acc)));")
        w.line()
        w.comment(
            "cp.async and st.shared write through the generic proxy, wgmma reads through the async one:"
        )
        w.comment("each thread fences its writes before the barrier that hands them to the warp groups.")
        with w.block("CUTE_DEVICE void fence_async_shared()"):
            w.line('asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");')
        w.line()
        fa2.emit_row_copy_helpers(w)
        if dq_bulk:
            w.line()
            w.comment("dQ's tile from shared memory added into global fp32 by the bulk-copy engine, one")
            w.comment("instruction a tile (its own commit group); then wait until it has read the tile")
            with w.block("CUTE_DEVICE void bulk_reduce_add_f32(float* gmem, float const* smem, int bytes)"):
                w.line(
                    'asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\\n" '
                    '::"l"(gmem), "r"(cute::cast_smem_ptr_to_uint(smem)), "r"(bytes) : "memory");'
                )
                w.line('asm volatile("cp.async.bulk.commit_group;\\n" ::: "memory");')
            with w.block("CUTE_DEVICE void bulk_wait_read()"):
                w.line('asm volatile("cp.async.bulk.wait_group.read 0;\\n" ::: "memory");')
            with w.block("CUTE_DEVICE void bulk_wait()"):
                w.line('asm volatile("cp.async.bulk.wait_group 0;\\n" ::: "memory");')
    w.line()


def _emit_main(
    w: CodeWriter,
    plan: KernelPlan,
    partials: list[tuple[Load, Expr]],
    tail: list[tuple[str, str, str]],
    deterministic: bool,
    *,
    overlap_p: bool = False,
    key_major: bool = False,
    dq_bulk: bool = False,
    heavy_columns: int = 0,
    head_sections: bool = False,
    swap_dq: bool = False,
    ops: dict[str, Operand] | None = None,
) -> None:
    reg = Regions(plan.ir)
    col = fa2.grid_col(key_major or heavy_columns > 0)
    softmax = plan.ir.normalizer == "softmax"
    split = split_head(plan.head_dim_qk)
    threads = THREADS + PRODUCER_THREADS
    fa2._params(w, f"{plan.kernel_name}_bwd_dq_dk_dv", BACKWARD_PARAMS, tail + list(BACKWARD_TMA_ABI), threads=threads)
    with w.indent():
        fa2._emit_main_aliases(w, f"{plan.kernel_name}_bwd_traits")
        w.comment(
            "the 128-byte swizzle repeats every 1024 bytes and wgmma reads it from the address: round up"
        )
        w.line("extern __shared__ char smem_raw[];")
        w.comment("(an offset added to smem_raw, not a rounded integer: the pointers keep the shared address")
        w.comment("space, so the rows' LSE and D are read by LDS and not by generic loads)")
        w.line(
            "char* smem = smem_raw + ((1024 - (cute::cast_smem_ptr_to_uint(smem_raw) & 1023)) & 1023);"
        )
        fa2._emit_block_indices(w, key_major=key_major, heavy_columns=heavy_columns, head_sections=head_sections)
        with w.tl(
            plan.line_of("alloc_k"), "K, V (this key block), dSᵀ, two stages of (Q, dO) in shared memory"
        ):
            w.comment(
                "raw pointers: a GMMA layout's tensor holds a swizzled iterator, so each view starts here"
            )
            w.line("Element* smem_k = reinterpret_cast<Element*>(smem);")
            w.line("Element* smem_v = smem_k + kBlockN * kHeadDim;")
            w.line("Element* smem_ds = smem_v + kBlockN * kHeadDim;")
            if split:
                w.line("Element* smem_p = smem_ds + 2 * kBlockM * kBlockN;  // dS: one buffer per stage; P too")
                w.line("Element* smem_qdo = smem_p + 2 * kBlockM * kBlockN;")
            else:
                w.line("Element* smem_qdo = smem_ds + 2 * kBlockM * kBlockN;  // dS: one buffer per stage")
            w.line("constexpr int kQdOElems = 2 * kBlockM * kHeadDim;  // one stage: Q then dO")
            w.line(
                "float* smem_rows = reinterpret_cast<float*>(smem_qdo + 2 * kQdOElems);  // per stage: LSE, then D"
            )
            rows_end = "smem_rows + 2 * 2 * kBlockM"
            if dq_bulk:
                w.line(f"float* smem_dq = {rows_end};  // dQ's tile in its fragment order, for the bulk add")
                rows_end = "smem_dq + kBlockM * kHeadDim"
            w.line(f"uint64_t* full_qdo = reinterpret_cast<uint64_t*>({rows_end});  // per stage")
            w.line("uint64_t* empty_qdo = full_qdo + 2;")
            w.line("uint64_t* full_kv = full_qdo + 4;  // K and V of the key block: TMA (producer)")
            w.line("uint64_t* empty_kv = full_qdo + 5;  // the consumers are done with them")
        w.line()
        fa2._emit_dq_slice(w, deterministic, col)
        _emit_stage_barriers(w, plan)
        with w.block("if (tidx >= Traits::kNThreads)"):
            _emit_producer(w, plan, reg, softmax, partials, col, dq_bulk)
        w.line("cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();")
        w.comment("The three warp-group MMAs: K, V, Kᵀ and dS are fixed, Q and dO move with the stage")
        w.line("typename Traits::TiledMmaSdP tiled_mma_sdp;")
        w.line("auto thr_mma_sdp = tiled_mma_sdp.get_thread_slice(tidx);  // this thread's accumulators")
        w.line("typename Traits::TiledMmadKV tiled_mma_dkv;")
        w.line("auto thr_mma_dkv = tiled_mma_dkv.get_thread_slice(tidx);")
        w.line("typename Traits::TiledMmadQ tiled_mma_dq;")
        w.line("auto thr_mma_dq = tiled_mma_dq.get_thread_slice(tidx);")
        w.comment("The shared-memory operands are partitioned by warp group through a warp-uniform index, so")
        w.comment("ptxas keeps their GMMA descriptors in uniform registers (as the forward's consumers do)")
        w.line("const int wg = __shfl_sync(0xffffffff, tidx / 128, 0);")
        assert ops is not None, "the operands' descriptors (`operands`)"
        for m in ("sdp", "dkv", "dq"):
            w.line(f"auto wg_mma_{m} = tiled_mma_{m}.get_thread_slice(wg * 128);  // its (M, N) coordinate")
        w.comment("Their GMMA descriptors (Traits::DescLayout*), what CuTe's partition_fragment_A / _B give this")
        w.comment("warp group (tests/translator/test_sm90_bwd.py), without instantiating them")
        _desc_tensor(w, "tSrK", "smem_k", ops["K"], "K", M_COORD.format("sdp"))
        _desc_tensor(w, "tdPrV", "smem_v", ops["V"], "V", M_COORD.format("sdp"))
        _desc_tensor(w, "tdQrKt", "smem_k", ops["Kt"], "Kt", (M_COORD if swap_dq else N_COORD).format("dq"))
        wg_queries, wg_atoms = ("32·wg + ", "Traits::kWgQueries / 8") if split else ("", "kBlockM / 8")
        w.comment("dSᵀ's stmatrix addresses (shared window) for stage 0, once, in closed form: lane l of warp w in")
        w.comment("warp group wg writes row l % 8 of matrix m = l / 8 of atom i (the fragment's values 8i … 8i + 7),")
        w.comment(
            f"query {wg_queries}8·(2i + m/2) + l % 8 and keys {'' if split else '64·wg + '}16·w + 8·(m % 2) …, in dS's "
            "K-major atoms of 8 queries"
        )
        w.comment("× 64 keys (1 KB, query blocks fastest) whose 128-byte swizzle puts 16-byte chunk c of row r at c ^ r.")
        w.comment("What CuTe's make_tiled_copy_C / partition_D give for every thread and tile")
        w.comment("(tests/translator/test_sm90_bwd.py), without instantiating them (about 3 s of nvcc). A stage is")
        w.comment("a whole number of the atoms, so another stage's addresses are these plus its offset.")
        w.line(
            'static_assert(kBlockM * kBlockN * sizeof(Element) % 1024 == 0, "a dS stage: whole 1 KB swizzle atoms");'
        )
        if split:
            w.line('static_assert(kBlockN == 64 && Traits::kWgQueries % 16 == 0, "dS: 64 keys, each warp group\'s query pairs of 8");')
        else:
            w.line('static_assert(kBlockN == 128 && kBlockM % 16 == 0, "dS: two warp groups\' 64 keys, query pairs of 8");')
        steps = "Traits::kWgQueries / 16"
        w.line(f"uint32_t ds_addr[{steps}];")
        w.line("{")
        with w.indent():
            w.line("const int warp = tidx % 128 / 32, lane = tidx % 32, m = lane / 8, r = lane % 8;")
            w.line(f"const uint32_t base = cast_smem_ptr_to_uint(smem_ds) + (tidx / 128 * ({wg_atoms}) + m / 2) * 1024")
            w.line("    + r * 128 + ((2 * warp + m % 2) ^ r) * 16;")
            w.line("CUTE_UNROLL")
            w.line(f"for (int i = 0; i < {steps}; ++i) ds_addr[i] = base + i * 2048;  // atom i: queries 16i …")
        w.line("}")
        w.line(
            "Tensor tScS = tl::partition_C(thr_mma_sdp, make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{}),"
        )
        w.line("    typename Traits::CoordLayoutS{});  // (key, query)")
        w.line()
        w.line("int fill = 0;  // query blocks consumed so far: stage fill % 2, its phase (fill / 2) % 2")
        w.line("int kv_fill = 0;  // key blocks consumed so far: the K/V barriers' phase kv_fill % 2")
        with w.tl(plan.line_of("loop"), "the key blocks of this grid column (one, unless deterministic)"):
            w.line("CUTE_NO_UNROLL")
            with w.block(f"for (int n_block = {col}; n_block < n_blocks; n_block += gridDim.x)"):
                _emit_key_block(w, plan, reg, softmax, partials, ops, overlap_p, dq_bulk, swap_dq)
    w.line("}")
    w.line()


def _emit_key_block(
    w: CodeWriter,
    plan: KernelPlan,
    reg: Regions,
    softmax: bool,
    partials: list[tuple[Load, Expr]],
    ops: dict[str, Operand],
    overlap_p: bool = False,
    dq_bulk: bool = False,
    swap_dq: bool = False,
) -> None:
    """The consumers' key block: K and V (the producer's TMA) waited for, dK and dV over every query
    block of the group's heads, dQ's share added into dq_slice, K and V released, dK and dV stored."""
    with w.tl(plan.line_of("load_k"), "K and V of this key block: the producer's TMA"):
        w.line("Barrier::wait(full_kv, kv_fill & 1);")
    fa2.emit_dkdv_accumulators(w, layout="AccLayoutdKV")
    with w.block("for (int g = 0; g < group; ++g)"):
        with w.tl(
            plan.line_of("mask") if plan.mask != "none" else None, "block classes: skip empty query blocks"
        ):
            summed = fa2._emit_group_head(w, reg, softmax, partials, loads="none")
        w.line("CUTE_NO_UNROLL")
        with w.block("for (int m_block = m_block_min; m_block < m_block_max; )"):
            _emit_query_block(w, plan, reg, softmax, partials, ops, overlap_p, dq_bulk, swap_dq)
        fa2._emit_group_tail(w, reg, partials, summed)
    _emit_store_dkv_shared(w, scaled=fa2.scale_folded_grad(plan.ir)[0], split=split_head(plan.head_dim_qk))
    w.line("tl::fence_async_shared();  // the reads of K's and V's tiles before the next key block's TMA")
    w.line("Barrier::arrive(empty_kv);  // K's and V's tiles are free again")
    w.line("++kv_fill;")


def _emit_store_dkv_shared(w: CodeWriter, *, scaled: bool, split: bool = False) -> None:
    """dK and dV of the key block through K's and V's shared tiles (FlashAttention-3's epilogue): the
    accumulators into a row-major tile whose 16-byte pieces are swizzled (piece c of row r at c ^ (r % 8))
    by stmatrix, four 8 × 8 pieces a store at addresses in closed form (`dkv_addr`), then each row
    leaves in 16-byte stores, a warp whole rows a step (two at d = 128). K and V are released after the reads
    (`empty_kv`), so a grid column's next key block (deterministic) cannot overwrite them. `split`
    (`split_head`): a warp group owns half of the columns of all 64 rows, not 64 rows."""
    w.comment("dK and dV of this key block through K's and V's tiles (rows past seqlen_k are not stored)")
    if scaled:
        w.line("CUTE_UNROLL")
        w.line("for (int i = 0; i < size(acc_dk); ++i) acc_dk(i) *= softmax_scale;  // dS left it out")
    w.comment("the addresses from a thread index read here: derived from the one before the loop, ptxas")
    w.comment("computed them there and kept them across it (spilled)")
    w.line("const int tidx_e = tl::thread_index();")
    for t in ("dK", "dV"):
        w.line(f"Tensor r{t} = tl::convert_fragment<Element>(acc_{t.lower()});")
        w.line(f"Tensor r{t}_rc = make_tensor(r{t}.data(), tl::acc_rowcol(r{t}.layout()));  // (row, col)")
    row0, piece0 = ("", "wg_piece + ") if split else ("64·wg + ", "")
    cols = "Traits::kWgCols"
    w.comment(f"stmatrix (8 × 8, ×4) a step: lane l of warp w in warp group wg gives row {row0}16·w + 8·(m % 2)")
    w.comment(f"+ l % 8 (m = l / 8) of the step's pieces {piece0}2i + m / 2 (its 16-byte piece of that row, swizzled);")
    w.comment("its registers are its accumulator pairs (row 8·(k % 2), pieces 2i + k / 2), k = 0 … 3")
    if split:
        w.line('static_assert(kBlockN == 64 && Traits::kWgCols % 16 == 0, "dK, dV: 64 rows, each warp group\'s columns");')
    else:
        w.line('static_assert(kBlockN == 128 && kHeadDim % 16 == 0, "dK, dV: two warp groups\' 64 rows, pieces in pairs");')
    w.line(f"uint32_t dkv_addr[{cols} / 16];  // step i, relative to the tile")
    w.line("{")
    with w.indent():
        w.line("const int lane = tidx_e % 32, m = lane / 8, q = lane % 8;")
        if split:
            w.line("const int row = tidx_e % 128 / 32 * 16 + (m % 2) * 8 + q;")
            w.line("const int wg_piece = tidx_e / 128 * (Traits::kWgCols / 8);  // this warp group's first piece")
        else:
            w.line("const int row = tidx_e / 128 * 64 + tidx_e % 128 / 32 * 16 + (m % 2) * 8 + q;")
        w.line("CUTE_UNROLL")
        w.line(
            f"for (int i = 0; i < {cols} / 16; ++i) dkv_addr[i] = row * (kHeadDim * 2) + (({piece0}2 * i + m / 2) ^ q) * 16;"
        )
    w.line("}")
    w.line(f"{CONSUMER_SYNC}  // the other warp group's last dQ wgmma has read K")
    w.line("const uint32_t smem_k_u = cast_smem_ptr_to_uint(smem_k), smem_v_u = cast_smem_ptr_to_uint(smem_v);")
    w.line("CUTE_UNROLL")
    with w.block(f"for (int i = 0; i < {cols} / 16; ++i)"):
        for t, base in (("dK", "smem_k_u"), ("dV", "smem_v_u")):
            regs = ", ".join(
                f"tl::pack2(r{t}_rc({k % 2}, 4 * i + {2 * (k // 2)}), r{t}_rc({k % 2}, 4 * i + {2 * (k // 2) + 1}))"
                for k in range(4)
            )
            w.line(f"tl::stsm_x4({base} + dkv_addr[i], {regs});")
    w.line(f"{CONSUMER_SYNC}  // both warp groups' rows are in the tiles")
    w.comment("16-byte row stores: thread t copies piece t % kPieces of rows t / kPieces + kRowsAStep·k (the")
    w.comment("same piece, so the same swizzle, in each of its rows)")
    w.line("constexpr int kPieces = kHeadDim / 8, kRowsAStep = Traits::kNThreads / kPieces;")
    w.line(
        "static_assert(Traits::kNThreads % kPieces == 0 && kRowsAStep % 8 == 0 && kBlockN % kRowsAStep == 0, "
        '"a thread: one piece, rows a whole number of swizzle periods apart");'
    )
    w.line("const int piece = tidx_e % kPieces, r0 = tidx_e / kPieces;")
    w.line("const int at0 = r0 * kHeadDim + (piece ^ (r0 % 8)) * 8;")
    w.line("const int row0 = n_block * kBlockN + r0;")
    for t in ("k", "v"):
        w.line(
            f"Element* d{t}_row = static_cast<Element*>(d{t}) + bidb * d{t}_batch_stride + bidh_kv * d{t}_head_stride"
            f" + row0 * d{t}_row_stride + piece * 8;"
        )
    w.line("CUTE_UNROLL")
    with w.block("for (int k = 0; k < kBlockN / kRowsAStep; ++k)"):
        w.line("if (row0 + k * kRowsAStep >= seqlen_k) break;")
        for t in ("k", "v"):
            w.line(
                f"*reinterpret_cast<uint4*>(d{t}_row + k * kRowsAStep * d{t}_row_stride) = "
                f"*reinterpret_cast<const uint4*>(smem_{t} + at0 + k * kRowsAStep * kHeadDim);"
            )


def _emit_query_block(
    w: CodeWriter,
    plan: KernelPlan,
    reg: Regions,
    softmax: bool,
    partials: list[tuple[Load, Expr]],
    ops: dict[str, Operand],
    overlap_p: bool = False,
    dq_bulk: bool = False,
    swap_dq: bool = False,
) -> None:
    w.line("const int next = next_m_block(m_block);")
    w.line("const bool masked = block_class(m_block) == 1;")
    w.line("const int stage = fill & 1;")
    with w.tl(plan.line_of("load_q"), "this block's Q, dO, LSE and D: the producer's stage"):
        w.line("Barrier::wait(&full_qdo[stage], (fill >> 1) & 1);")
    w.comment("dS of this block: the other buffer's readers (the previous block's dQ) may still run")
    w.line("Element* smem_ds_stage = smem_ds + stage * (kBlockM * kBlockN);")
    _desc_tensor(w, "tdQrdS", "smem_ds_stage", ops["dS"], "dS", M_COORD.format("dq"))
    w.line("Element* smem_q_stage = smem_qdo + stage * kQdOElems;  // then dO's tile")
    sdp_n, dkv_n = N_COORD.format("sdp"), N_COORD.format("dkv")
    _desc_tensor(w, "tSrQ", "smem_q_stage", ops["QdO"], "QdO", sdp_n)
    _desc_tensor(w, "tdPrdO", "smem_q_stage + kBlockM * kHeadDim", ops["QdO"], "QdO", sdp_n)
    _desc_tensor(w, "tdVrdO", "smem_q_stage + kBlockM * kHeadDim", ops["QdOt"], "QdOt", dkv_n, "  // dOᵀ")
    _desc_tensor(w, "tdKrQ", "smem_q_stage", ops["QdOt"], "QdOt", dkv_n, "  // Qᵀ")
    with w.tl(plan.line_of("gemm_qk"), "Sᵀ = K·Qᵀ (raw scores) and dPᵀ = V·dOᵀ, SS wgmma"):
        w.line("Tensor acc_s = make_tensor<float>(typename Traits::AccLayoutSdP{});  // Sᵀ (kBlockN, kBlockM)")
        w.line("Tensor acc_dp = make_tensor<float>(typename Traits::AccLayoutSdP{});  // dPᵀ")
        w.line("tl::wgmma<true, false>(tiled_mma_sdp, tSrK, tSrQ, acc_s);")
        w.line("tl::wgmma<true, false>(tiled_mma_sdp, tdPrV, tdPrdO, acc_dp);")
        if overlap_p:
            w.line("warpgroup_wait<1>();  // Sᵀ only: dPᵀ is the younger commit group and keeps running")
            w.line("warpgroup_fence_operand(acc_s);")
        else:
            w.line("warpgroup_wait<0>();")
            w.line("warpgroup_fence_operand(acc_s);")
            w.line("warpgroup_fence_operand(acc_dp);")
    region = plan.line_of("score_mod") or plan.line_of("mask_expr") or plan.line_of("softmax")

    def wait_dp() -> None:
        with w.tl(plan.line_of("gemm_qk"), "wait for dPᵀ = V·dOᵀ, after Pᵀ"):
            w.comment("ptxas hoists a wgmma wait to the top of its basic block (docs/hopper.md); the join of")
            w.comment("Pᵀ's two loops ends one too, this boundary holds whatever ptxas makes of them: the")
            w.comment("exp2s of Pᵀ stay above the wait and run beside dPᵀ's wgmma")
            w.line("tl::block_boundary(seqlen_k >> 30);")
            w.line("warpgroup_wait<0>();")
            w.line("warpgroup_fence_operand(acc_dp);")

    with w.tl(region, "Pᵀ and dSᵀ per score: the score region and its derivative (kernel_ir.grad)"):
        fa2._emit_scores(w, reg, softmax, partials, transposed=True, wait_dp=wait_dp if overlap_p else None)
    w.line("Tensor rP = tl::convert_fragment<Element>(acc_s);")
    w.line("Tensor rdS = tl::convert_fragment<Element>(acc_dp);")
    if split_head(plan.head_dim_qk):
        _emit_split_dkv(w, plan, dq_bulk, ops)
        return
    with w.tl(plan.line_of("gemm_pv"), "dV += Pᵀ·dO, RS wgmma (Pᵀ: the accumulator re-viewed as A)"):
        w.line("Tensor tdVrP = make_tensor(rP.data(), tl::acc_to_A(rP.layout()));")
        w.comment("dSᵀ for dQ's GEMM: accumulator elements → shared, one stmatrix (8 × 8, transposed, ×4) a step")
        w.line("Tensor tdSrdS = recast<uint32_t>(rdS);  // atom i: its 32-bit pairs 4i … 4i + 3 (ds_addr)")
        _emit_stsm_t(w, (("tdSrdS", ""),))
        w.line("tl::wgmma<false, true>(tiled_mma_dkv, tdVrP, tdVrdO, acc_dv);")
        w.line("tl::fence_async_shared();")
        w.line(f"{CONSUMER_SYNC}  // dS of both warp groups is in shared memory")
    _emit_dq_dk(w, plan, dq_bulk, swap_dq, split=False)


def _emit_split_dkv(w: CodeWriter, plan: KernelPlan, dq_bulk: bool, ops: dict[str, Operand]) -> None:
    """`split_head`: Pᵀ and dSᵀ of this warp group's query columns into shared memory (stmatrix, the
    closed-form `ds_addr`; Pᵀ's buffer follows dS's two), then, once both warp groups' are there, dV, dQ
    and dK as SS wgmma, each warp group its half of the head dim."""
    with w.tl(plan.line_of("gemm_pv"), "Pᵀ and dSᵀ → shared memory (both warp groups' query columns)"):
        w.comment("one stmatrix (8 × 8, transposed, ×4) a step; atom i: the 32-bit pairs 4i … 4i + 3 (ds_addr)")
        w.line("Tensor tPrP = recast<uint32_t>(rP);")
        w.line("Tensor tdSrdS = recast<uint32_t>(rdS);")
        w.line("constexpr uint32_t kPOffset = 2 * kBlockM * kBlockN * sizeof(Element);  // smem_p − smem_ds")
        _emit_stsm_t(w, (("tPrP", " + kPOffset"), ("tdSrdS", "")))
        w.line("tl::fence_async_shared();")
        w.line(f"{CONSUMER_SYNC}  // Pᵀ and dSᵀ of both warp groups are in shared memory")
        _desc_tensor(w, "tdVrPt", "smem_p + stage * (kBlockM * kBlockN)", ops["dSt"], "dSt", note="  // Pᵀ")
        _desc_tensor(w, "tdKrdSt", "smem_ds_stage", ops["dSt"], "dSt", note="  // dSᵀ")
    with w.tl(plan.line_of("gemm_pv"), "dV += Pᵀ·dO, SS wgmma (this warp group's head-dim columns)"):
        w.line("tl::wgmma<false, false>(tiled_mma_dkv, tdVrPt, tdVrdO, acc_dv);")
    _emit_dq_dk(w, plan, dq_bulk, False, split=True)


def _desc_tensor(
    w: CodeWriter, name: str, ptr: str, op: Operand, layout: str, coord: str = "", note: str = ""
) -> None:
    """`name`: the operand `op` at shared pointer `ptr` as a tensor of GMMA descriptors; this warp
    group's part `coord` · op.wg_offset elements on, `coord` its M or N coordinate in the TiledMMA's
    thread layout (`thr_vmnk_`), the value CuTe's partition offsets by (computed as CuTe does, the
    machine code is the same; `wg % 2` moved a uniform register in one build)."""
    at = f"{ptr} + {coord} * {op.wg_offset}" if op.wg_offset else ptr
    w.line(
        f"Tensor {name} = make_tensor(GMMA::DescriptorIterator{{tl::gmma_desc<GMMA::LayoutType::{op.layout_type}>("
        f"{at}, {op.lbo}, {op.sbo})}}, typename Traits::DescLayout{layout}{{}});{note}"
    )


def _emit_stsm_t(w: CodeWriter, stores: tuple[tuple[str, str], ...]) -> None:
    """Each (32-bit register view, C++ byte offset from this stage's dS tile) of `stores` into shared
    memory by stmatrix (8 × 8, transposed, ×4), a step per 16 of the warp group's query columns, at the
    closed-form `ds_addr`."""
    w.line("const uint32_t ds_stage = stage * (kBlockM * kBlockN * sizeof(Element));")
    w.line("CUTE_UNROLL")
    with w.block("for (int i = 0; i < Traits::kWgQueries / 16; ++i)"):
        for t, off in stores:
            regs = ", ".join(f"{t}(4 * i{f' + {k}' if k else ''})" for k in range(4))
            w.line(f"tl::stsm_x4_t(ds_addr[i] + ds_stage{off}, {regs});")


def _emit_dq_dk(w: CodeWriter, plan: KernelPlan, dq_bulk: bool, swap_dq: bool, *, split: bool) -> None:
    """dQ's GEMM, dK's (RS from dSᵀ's registers; `split`: SS from shared memory), dQ out under dK's GEMM,
    the waits, and the stage handed back."""
    dq, (m, n), ab, note = (
        ("dQᵀ = Kᵀ·dSᵀ", ("kHeadDim", "kBlockM"), "tdQrKt, tdQrdS", "  // dQᵀ")
        if swap_dq
        else ("dQ = dS·K", ("kBlockM", "kHeadDim"), "tdQrdS, tdQrKt", "")
    )
    with w.tl(plan.line_of("gemm_qk"), f"{dq} (SS) and dK += dSᵀ·Q ({'SS' if split else 'RS'}), dQ's atomics under dK's GEMM"):
        w.line(f"Tensor acc_dq = make_tensor<float>(typename Traits::AccLayoutdQ{{}});  // ({m}, {n}){note}")
        w.line(f"tl::wgmma<true, false>(tiled_mma_dq, {ab}, acc_dq);")
        if split:
            w.line("tl::wgmma<false, false>(tiled_mma_dkv, tdKrdSt, tdKrQ, acc_dk);")
        else:
            w.line("Tensor tdKrdS = make_tensor(rdS.data(), tl::acc_to_A(rdS.layout()));")
            w.line("tl::wgmma<false, true>(tiled_mma_dkv, tdKrdS, tdKrQ, acc_dk);")
        w.line("warpgroup_wait<1>();  // dV's and dQ's groups are done, dK's may still run")
        w.line("warpgroup_fence_operand(acc_dq);")
        if dq_bulk:
            _emit_dq_to_shared(w)
        else:
            w.comment(
                "in fragment order, four elements per float4, so a warp's 32 reductions cover 512 contiguous"
            )
            w.comment(
                "bytes (rows past seqlen_q add zeros into the tile's padding), each warp group's in its own"
            )
            w.comment("part of the tile; _bwd_convert_dq reads it so")
            w.line(f"float4* dq_tile = {_dq_part('reinterpret_cast<float4*>(dq_head + m_block * (kBlockM * kHeadDim))')};")
            w.line("CUTE_UNROLL")
            with w.block("for (int i = 0; i < size(acc_dq) / 4; ++i)"):
                w.line(
                    f"atomicAdd(dq_tile + i * {WG_THREADS}, "
                    "make_float4(acc_dq(4 * i), acc_dq(4 * i + 1), acc_dq(4 * i + 2), acc_dq(4 * i + 3)));"
                )
        w.line("warpgroup_wait<0>();")
        w.line("warpgroup_fence_operand(acc_dk);")
        w.line("warpgroup_fence_operand(acc_dv);")
    with w.tl(plan.line_of("load_q"), "Q, dO and the rows of this stage are read: the producer's again"):
        w.line("Barrier::arrive(&empty_qdo[stage]);")
    w.line("++fill;")
    w.line("m_block = next;")


def _emit_stage_barriers(w: CodeWriter, plan: KernelPlan) -> None:
    """The stages' mbarriers: full (the TMA thread's arrival with the stage's byte count, and one arrival
    per row lane, when its cp.async of LSE and D has landed) and empty (the 256 consumer threads arrive
    once they read the stage), then the last block-wide barrier."""
    with w.tl(plan.line_of("load_q"), "mbarriers of the (Q, dO) stages: full (producer), empty (consumers)"):
        w.line("using Barrier = cutlass::arch::ClusterTransactionBarrier;")
        with w.block("if (tidx == 0)"):
            w.line("CUTE_UNROLL")
            with w.block("for (int s = 0; s < 2; ++s)"):
                w.line("Barrier::init(&full_qdo[s], 1 + Traits::kRowLanes);")
                w.line("Barrier::init(&empty_qdo[s], Traits::kNThreads);")
            w.line("Barrier::init(full_kv, 1);")
            w.line("Barrier::init(empty_kv, Traits::kNThreads);")
            w.line("cutlass::arch::fence_barrier_init();")
        w.line("__syncthreads();  // the last block-wide barrier: the warp groups part ways below")


def _emit_producer(
    w: CodeWriter,
    plan: KernelPlan,
    reg: Regions,
    softmax: bool,
    partials: list[tuple[Load, Expr]],
    col: str,
    dq_bulk: bool = False,
) -> None:
    """The producer warp group: the consumers' walk over (key block, head, query block); once the
    consumers released the next stage, its first warp fills it: lane 0 issues Q's and dO's TMA loads (the
    stage's full barrier counts their bytes), the lanes copy the rows' LSE and D by cp.async, each lane's
    copies arriving on the same barrier when they land (`cp.async.mbarrier.arrive.noinc`). No thread
    waits for a load, so the producer runs a stage ahead from the moment the stage is free; TMA writes
    through the async proxy wgmma reads, and zero-fills rows past seqlen_q. `dq_bulk`: its last warp is
    the dQ writer."""
    w.comment("Producer warp group: registers back to the pool; its first warp loads, lane 0 by TMA")
    w.line("cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();")
    w.line("const int warp = (threadIdx.x - Traits::kNThreads) / 32, lane = threadIdx.x % 32;")
    if dq_bulk:
        with w.block("if (warp == Traits::kProducerThreads / 32 - 1)"):
            _emit_dq_writer(w, plan, reg, softmax, partials, col)
    w.line("if (warp != 0) return;  // the other warps have no work")
    with w.block("if (lane == 0)"):
        for desc in BACKWARD_TMA_PARAMS:
            w.line(f"cute::prefetch_tma_descriptor(&{desc});")
    w.line("int fill = 0;  // query blocks loaded so far: stage fill % 2, its phase (fill / 2) % 2")
    w.line("int kv_fill = 0;  // key blocks loaded so far")

    def load_kv() -> None:
        with w.tl(plan.line_of("load_k"), "K and V of this key block by TMA, once the last ones are read"):
            w.line("if (kv_fill > 0) Barrier::wait(empty_kv, (kv_fill - 1) & 1);")
            with w.block("if (lane == 0)"):
                w.line("Barrier::arrive_and_expect_tx(full_kv, Traits::kTxKV);")
                for desc, dst, cols in (("tma_k", "smem_k", "Traits::kBoxColsK"), ("tma_v", "smem_v", "Traits::kBoxCols")):
                    emit_tma_tiles(
                        w, [(desc, dst)], bar="full_kv", rows="kBlockN", boxes=f"kHeadDim / {cols}", box_cols=cols,
                        row0="n_block * kBlockN", head="bidh_kv", batch="bidb",
                    )  # fmt: skip
            w.line("++kv_fill;")

    with _consumers_walk(w, plan, reg, softmax, partials, col, key_block=load_kv):
        w.line("const int stage = fill & 1;")
        w.line("if (fill >= 2) Barrier::wait(&empty_qdo[stage], ((fill >> 1) & 1) ^ 1);")
        with (
            w.tl(plan.line_of("load_q"), "Q and dO by TMA (rows past seqlen_q arrive as zeros)"),
            w.block("if (lane == 0)"),
        ):
            w.line("Barrier::arrive_and_expect_tx(&full_qdo[stage], Traits::kTxQdO);")
            w.line("Element* stage_q = smem_qdo + stage * kQdOElems;")
            emit_tma_tiles(
                w, [("tma_q", "stage_q"), ("tma_do", "stage_q + kBlockM * kHeadDim")], bar="&full_qdo[stage]",
                rows="kBlockM", boxes="kHeadDim / Traits::kBoxCols", box_cols="Traits::kBoxCols",
                row0="m_block * kBlockM", head="bidh", batch="bidb",
            )  # fmt: skip
        if softmax:
            with w.tl(plan.line_of("load_q"), "the rows' LSE and D: cp.async, landing as arrivals"):
                w.line("float* rows = smem_rows + stage * 2 * kBlockM;")
                w.line("CUTE_UNROLL")
                with (
                    w.block("for (int r = lane; r < kBlockM; r += Traits::kRowLanes)"),
                    w.block("if (m_block * kBlockM + r < seqlen_q)"),
                ):
                    w.line("tl::cp_async_f32(rows + r, lse + row_base + m_block * kBlockM + r);")
                    w.line("tl::cp_async_f32(rows + kBlockM + r, dpsum + row_base + m_block * kBlockM + r);")
                w.line("cutlass::arch::cpasync_barrier_arrive_noinc(&full_qdo[stage]);")
        w.line("++fill;")
    w.line("return;")


@contextlib.contextmanager
def _consumers_walk(
    w: CodeWriter,
    plan: KernelPlan,
    reg: Regions,
    softmax: bool,
    partials: list[tuple[Load, Expr]],
    col: str,
    *,
    key_block: Callable[[], None] | None = None,
) -> Iterator[None]:
    """The consumers' (key block, head, query block) walk for a producer warp: the body runs once per
    query block the consumers compute, in their order (`m_block`, the head's `dq_head`, …); `key_block`
    emits what runs once per key block, before its heads."""
    with w.tl(plan.line_of("loop"), "the consumers' key blocks, heads and query blocks, in their order"):
        w.line("CUTE_NO_UNROLL")
        with w.block(f"for (int n_block = {col}; n_block < n_blocks; n_block += gridDim.x)"):
            if key_block is not None:
                key_block()
            with w.block("for (int g = 0; g < group; ++g)"):
                fa2._emit_group_head(w, reg, softmax, partials, loads="none")
                w.line("CUTE_NO_UNROLL")
                with w.block(
                    "for (int m_block = m_block_min; m_block < m_block_max; m_block = next_m_block(m_block))"
                ):
                    yield
                fa2.drop_head_temps(reg)


def _dq_part(tile: str) -> str:
    """This thread's first float4 of `tile` (a float4 pointer) in dq_accum's order: its warp group's
    contiguous part (size(acc_dq) / 4 float4s a thread), then its rank in the warp group."""
    return f"{tile} + wg * (size(acc_dq) / 4) * {WG_THREADS} + tidx % {WG_THREADS}"


# named barriers of the dQ tile (`dq_bulk`), one pair per consumer warp group: its part is in shared
# memory (full), the writer warp has read it (empty)
DQ_FULL, DQ_EMPTY = 2, 2 + DQ_GROUPS
DQ_BARRIER_THREADS = f"{WG_THREADS} + 32"


def _emit_dq_to_shared(w: CodeWriter) -> None:
    """`dq_bulk`, the consumers: each warp group waits until the writer warp has read its part of the
    previous block's tile, stores its part of this block's in dq_accum's order, fences it for the bulk
    copy (async proxy) and tells the writer, without waiting; the warp groups never wait for each other
    here (FlashAttention-3's per-warp-group dQ barriers)."""
    w.comment("the previous block's part is read by the bulk add (the first block: nothing to wait for)")
    w.line(f"if (fill > 0) tl::consumer_sync({DQ_EMPTY} + wg, {DQ_BARRIER_THREADS});")
    w.line(f"float4* dq_tile_s = {_dq_part('reinterpret_cast<float4*>(smem_dq)')};")
    w.line("CUTE_UNROLL")
    with w.block("for (int i = 0; i < size(acc_dq) / 4; ++i)"):
        w.line(
            f"dq_tile_s[i * {WG_THREADS}] = "
            "make_float4(acc_dq(4 * i), acc_dq(4 * i + 1), acc_dq(4 * i + 2), acc_dq(4 * i + 3));"
        )
    w.line("tl::fence_async_shared();  // st.shared before the bulk copy reads it")
    w.line(f"tl::consumer_arrive({DQ_FULL} + wg, {DQ_BARRIER_THREADS});")


def _emit_dq_writer(
    w: CodeWriter,
    plan: KernelPlan,
    reg: Regions,
    softmax: bool,
    partials: list[tuple[Load, Expr]],
    col: str,
) -> None:
    """`dq_bulk`, the producer's last warp: the consumers' walk; per query block and consumer warp group,
    wait for the group's part of the dQ tile in shared memory and add it to the block's dq_accum tile with
    one bulk reduction (lane 0); then wait until the copies have read both parts and hand them back."""
    w.comment("dQ writer: one bulk reduce-add of each warp group's part of each block's tile into dq_accum")
    w.line(f"constexpr int kPart = kBlockM * kHeadDim / {DQ_GROUPS};  // floats of a warp group's part")
    with _consumers_walk(w, plan, reg, softmax, partials, col):
        w.line("CUTE_UNROLL")
        with w.block(f"for (int g = 0; g < {DQ_GROUPS}; ++g)"):
            w.line(f"tl::consumer_sync({DQ_FULL} + g, {DQ_BARRIER_THREADS});")
            with w.block("if ((threadIdx.x & 31) == 0)"):
                w.line(
                    "tl::bulk_reduce_add_f32(dq_head + m_block * (kBlockM * kHeadDim) + g * kPart, "
                    "smem_dq + g * kPart, kPart * 4);"
                )
        w.line("if ((threadIdx.x & 31) == 0) tl::bulk_wait_read();  // both parts are read")
        w.line("__syncwarp();")
        w.line("CUTE_UNROLL")
        w.line(f"for (int g = 0; g < {DQ_GROUPS}; ++g) tl::consumer_arrive({DQ_EMPTY} + g, {DQ_BARRIER_THREADS});")
    w.line("if ((threadIdx.x & 31) == 0) tl::bulk_wait();  // every add has landed before the block exits")
