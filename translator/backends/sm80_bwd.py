# ruff: noqa: E501  (generated C++ lines are kept whole, so each reads as one statement)
"""The backward skeleton on the mma.sync family (sm_80 … sm_89, and sm_90 through PTX): three kernels in
FlashAttention-2's structure, rendered from the same kernel IR as the forward.

    <name>_bwd_dot_do_o    D = rowsum(dO ∘ O) per query row (fp32); a learnable sink's gradient
    <name>_bwd_dq_dk_dv    one thread block per (key block, batch, K/V head): K and V stay in shared memory
                           while the block walks the query blocks of every query head of its GQA group,
                           recomputing P = exp(X − LSE) from Q, K and the forward's LSE, with
                             dV += Pᵀ·dO,  dP = dO·Vᵀ,  dX = P ∘ (dP − D),  dS = dX · dX/ds,
                             dK += dSᵀ·Q,  dQ += dS·K (fp32, atomicAdd into dq_accum),
                           so dK and dV come out summed over the group without a second pass
    <name>_bwd_convert_dq  dq_accum (fp32) → dQ in the input dtype (deterministic: the sum of its slices)
    <name>_bwd_row_grads   where a learnable read is uniform over a (batch, head): the correction of its
                           gradient for D's rounding error (`translator.backends.sm80_bwd_rows`)

Deterministic dQ (FA2's scheme): the grid has dq_splits columns, column x walks the key blocks x, x +
dq_splits, … and adds into its own dq_accum slice, so every element's additions come from one thread in
program order.

dX/ds is the score region's symbolic derivative (`kernel_ir.grad`): 1·scale for the plain score, the
chain rule through tanh, sigmoid, where, … otherwise; a learnable side tensor adds Σ dX · ∂X/∂read at
each read's index. The masks reuse the forward's interval block classification with the roles of the
loops swapped (query blocks of one key block). Without a softmax (sigmoid, ReLU attention) P = X on kept
scores, dX = dP · output_scale, and no D is needed.
"""

from __future__ import annotations

from collections.abc import Callable

from kernel_ir import grad, passes
from kernel_ir.expr import F32, Const, Expr, Load, Op, Var, text, walk
from kernel_ir.program import Forward
from runner.abi import (
    BACKWARD_CONVERT_PARAMS,
    BACKWARD_CONVERT_SCALE_PARAM,
    BACKWARD_PARAMS,
    BACKWARD_PREPROCESS_PARAMS,
    BACKWARD_PREPROCESS_ZERO_PARAMS,
    BACKWARD_ROW_SUMS_PARAM,
    BackwardSpec,
    backward_program_params,
)
from tl_language import gpu
from translator.backends.arch import ELEMENT, arch_facts
from translator.backends.regions import (
    Regions,
    block_mask_read,
    emit_block_mask_kernel,
    emit_block_rectangle,
    emit_key_arrays,
    emit_region_helpers,
    emit_trim_by_probes,
    linear_c,
)
from translator.backends.row_helpers import emit_row_helpers
from translator.backends.sm80_bwd_rows import (
    LOG2E,
    POS_INF,
    emit_row_grads,
    emit_row_sums,
    row_corrected,
    row_sums_per_row,
)
from translator.errors import TranslateError, unsupported
from translator.plan import KernelPlan
from translator.writer import CodeWriter

# elements of one dq_accum slice: (batch, heads, m_blocks · kBlockM, kHeadDim), each query tile in the dQ
# MMA's fragment order
DQ_SLICE = "static_cast<long long>(batch) * heads * m_blocks * (kBlockM * kHeadDim)"
# a section of heads the key-major grid takes at once (`_emit_block_indices`): well inside the H100's and
# H200's 50 MB of L2
L2_SECTION_BYTES = 32 << 20
PREPROCESS_ROWS = 32  # query rows per block of the D kernel: 8 warps, 4 rows each
THREADS = 256


def shared_bytes(block_m: int, block_n: int, head_dim: int) -> int:
    """K, V, P, dS, and two stages of Q, dO (16-bit) and of the rows' LSE and D (fp32)."""
    return 2 * (2 * 2 * block_m * head_dim + 2 * block_n * head_dim + 2 * block_m * block_n) + 2 * 2 * block_m * 4


# The dQ/dK/dV kernel's static shared memory besides the dynamic buffer (its block-class flags).
STATIC_SHARED = 1024


def tiles(head_dim: int, smem_per_block: int = 0) -> tuple[int, int]:
    """(kBlockM, kBlockN): FA2's 128 × 128 at d 64 where it fits the block's shared memory (162 KB: sm_80 and
    sm_90, not sm_86 / sm_89; H200: +8–9 % non-causal, +12–15 % causal over 64 × 128,
    docs/results/2026-12-04-h200-backward-sm80-d64-tile.json), else 64 × 128 for d ≤ 128 (80 / 128 KB),
    64 × 64 above."""
    if head_dim == 64 and shared_bytes(128, 128, head_dim) + STATIC_SHARED <= smem_per_block:
        return 128, 128
    return (64, 128) if head_dim <= 128 else (64, 64)


def generate_backward(
    plan: KernelPlan,
    *,
    learnable: tuple[str, ...] = (),
    tl_file: str | None = None,
    deterministic: bool = False,
    block_m: int | None = None,
) -> tuple[str, BackwardSpec]:
    """The backward's .cu source and its launch spec. Raises TranslateError for what it cannot derive.
    `deterministic`: dQ bit-identical from run to run (each grid column adds into its own dq_accum
    slice in program order, the convert kernel sums the slices in order) instead of atomics from every
    key block; side-tensor gradients still add through atomics. `block_m`: the query tile (64, or 128 at
    head dim 64: FA2's 128 × 128 tile there, dQ on 4 × 2 warps)."""
    _check(plan, learnable, block_m)
    d = plan.head_dim_qk
    target = gpu.target(plan.arch)
    limit = target.smem_per_block if target else 0
    block_m, block_n = tiles(d, limit) if block_m is None else (block_m, tiles(d)[1])
    smem = shared_bytes(block_m, block_n, d)

    def defs(w: CodeWriter) -> None:
        _emit_traits(w, plan, block_m, block_n)
        _emit_helpers(w)

    return assemble(
        plan,
        learnable=learnable,
        tl_file=tl_file,
        deterministic=deterministic,
        notes=(
            f"Target {plan.arch}, {plan.dtype}, head dim {d}; FlashAttention-2's structure (three kernels).",
        ),
        emit_defs=defs,
        emit_main=_emit_main,
        line_directives=False,
        block_m=block_m,
        block_n=block_n,
        shared_bytes=smem,
        arch=plan.arch,
    )


MainEmitter = Callable[
    [CodeWriter, KernelPlan, list[tuple[Load, Expr]], list[tuple[str, str, str]], bool], None
]


def assemble(
    plan: KernelPlan,
    *,
    learnable: tuple[str, ...],
    tl_file: str | None,
    deterministic: bool,
    notes: tuple[str, ...],
    emit_defs: Callable[[CodeWriter], None],
    emit_main: MainEmitter,
    line_directives: bool,
    block_m: int,
    block_n: int,
    shared_bytes: int,
    arch: str,
    includes: tuple[str, ...] = (),
    dq_vector: int = 1,
    dq_groups: int = 1,
    dq_swapped: bool = False,
    dq_coords: str = "",
    main_threads: int = 0,
    main_params: tuple[str, ...] = (),
) -> tuple[str, BackwardSpec]:
    """One backward skeleton's file and spec around its dQ/dK/dV kernel (`emit_main`, after the traits
    and helpers of `emit_defs`): the D kernel, the dQ conversion and the row gradients are the same for
    every skeleton, and so are the kernels' parameters, but for `main_params`, which `emit_main`'s kernel
    takes after them (the sm_90 producer's TMA descriptors). `dq_vector`, `dq_groups`, `dq_swapped`: how the
    dQ/dK/dV kernel adds its dQ tile into dq_accum (`_emit_convert`); `dq_coords`: the traits' thrfrg_C
    layout of dQ's identity tensor, if they write it out (sliced by `tl::partition_C`)."""
    ir = plan.ir
    name = plan.kernel_name
    w = CodeWriter()
    src = tl_file or f"{name}.tl"
    w.comment(f"The backward of {src}, derived by the TL translator from the forward's kernel IR.")
    for note in notes:
        w.comment(note)
    w.line("#include <cute/tensor.hpp>")
    w.line("#include <cutlass/numeric_conversion.h>")
    for inc in includes:
        w.line(inc)
    w.line()
    w.line("using namespace cute;")
    w.line()
    emit_defs(w)
    partials = grad.tensor_partials(_score(ir), learnable) if learnable else []
    sink_partials = grad.tensor_partials(ir.sink, learnable) if (learnable and ir.sink is not None) else []
    program = None if ir.plain else ir.to_dict()
    tail = list(backward_program_params(program, tuple(learnable)))
    corrected = row_corrected(ir, partials)
    if corrected:
        tail.append(BACKWARD_ROW_SUMS_PARAM)
    _emit_preprocess(w, plan, sink_partials, tail)
    emit_main(w, plan, partials, tail, deterministic)
    dq_scale = scale_folded_grad(ir)[0]
    _emit_convert(w, plan, dq_vector, groups=dq_groups, swapped=dq_swapped, scaled=dq_scale, coords=dq_coords)
    if ir.block_mask:
        emit_block_mask_kernel(
            w, ir, name=f"{name}_bwd", block_m=block_m, block_n=block_n, tag_line=plan.line_of("mask_expr")
        )
    if corrected:
        emit_row_grads(
            w,
            ir,
            partials,
            corrected,
            kernel=f"{name}_bwd_row_grads",
            threads=THREADS,
            open_kernel=lambda k: _params(w, k, BACKWARD_PARAMS, tail),
        )
    source, _ = w.render(
        tl_file=tl_file if line_directives else None,
        cu_file=f"{name}.bwd.cu",
        line_directives=line_directives,
    )
    extra = tuple(p[0] for p in tail)
    spec = BackwardSpec(
        name=name,
        block_m=block_m,
        block_n=block_n,
        threads=THREADS,
        main_threads=main_threads,
        dq_scale=dq_scale,
        dq_zeroed=True,
        shared_bytes=shared_bytes,
        dtype=plan.dtype,
        head_dim=plan.head_dim_qk,
        arch=arch,
        mask=plan.mask,
        window=plan.window,
        preprocess_rows=PREPROCESS_ROWS,
        program=program,
        learnable=tuple(learnable),
        params=tuple(p[0] for p in BACKWARD_PARAMS) + extra + main_params,
        row_sums=row_sums_per_row(corrected),
        deterministic=deterministic,
        tl_file=tl_file,
    )
    return source, spec


def _check(plan: KernelPlan, learnable: tuple[str, ...], block_m: int | None = None) -> None:
    def fail(why: str, *keys: str) -> TranslateError:
        """Reported on the first TL line of `keys` the plan knows, else on the Kernel line."""
        return TranslateError([unsupported(plan.range_of(*keys, "kernel"), f"the backward: {why}")])

    if block_m not in (None, 64) and (block_m, plan.head_dim_qk) != (128, 64):
        raise fail(f"a query tile of {block_m} rows: this skeleton has 64, and 128 at head dim 64")

    if plan.head_dim_qk != plan.head_dim_v:
        raise fail(
            f"head dims of Q·Kᵀ ({plan.head_dim_qk}) and V ({plan.head_dim_v}) must be equal",
            "load_v",
            "alloc_v",
        )
    if plan.head_dim_qk % 64 or plan.head_dim_qk > 256:
        raise fail(
            f"head dim {plan.head_dim_qk}: the backward tiles need a multiple of 64 up to 256", "d", "load_q"
        )
    if plan.compute_capability < (8, 0):
        raise fail(f"{plan.arch}: the backward needs cp.async and m16n8k16 (sm_80 or newer)", "target")
    declared = {t.name: t for t in plan.ir.tensors}
    for n in learnable:
        if n not in declared or declared[n].dtype != "float32":
            raise fail(f"`{n}` is not a float32 side tensor of the program: it cannot be learnable")
    try:
        grad.derivative(plan.ir.score)
        if learnable:
            grad.tensor_partials(plan.ir.score, learnable)
    except grad.NoDerivative as exc:
        raise fail(str(exc), "score_mod", "mask_expr") from None


def _emit_traits(w: CodeWriter, plan: KernelPlan, block_m: int, block_n: int) -> None:
    atom = arch_facts(plan).mma_atom
    name = f"{plan.kernel_name}_bwd_traits"
    w.comment("Tiles and layouts of the dQ/dK/dV kernel.")
    with w.block(f"struct {name}", "};"):
        w.line(f"using Element = {ELEMENT[plan.dtype]};")
        w.line(f"static constexpr int kBlockM = {block_m};  // query rows per step of the loop")
        w.line(f"static constexpr int kBlockN = {block_n};  // key rows of this thread block")
        w.line(f"static constexpr int kHeadDim = {plan.head_dim_qk};")
        w.line(f"static constexpr int kNThreads = {THREADS};")
        w.line(f"using MmaAtom = MMA_Atom<{atom}>;")
        w.comment("S = Q·Kᵀ and dP = dO·Vᵀ, (kBlockM, kBlockN): 2 × 4 warps")
        w.line("using TiledMmaSdP = TiledMMA<MmaAtom, Layout<Shape<_2, _4, _1>>, Tile<_32, _64, _16>>;")
        w.comment("dV = Pᵀ·dO and dK = dSᵀ·Q, (kBlockN, kHeadDim): 4 × 2 warps")
        w.line("using TiledMmadKV = TiledMMA<MmaAtom, Layout<Shape<_4, _2, _1>>, Tile<_64, _32, _16>>;")
        if block_m == 128:  # FA2's AtomLayoutMdQ = 4 for its 128-row tile
            w.comment("dQ = dS·K, (kBlockM, kHeadDim): 4 × 2 warps")
            w.line("using TiledMmadQ = TiledMMA<MmaAtom, Layout<Shape<_4, _2, _1>>, Tile<_64, _32, _16>>;")
        else:
            w.comment("dQ = dS·K, (kBlockM, kHeadDim): 2 × 4 warps")
            w.line("using TiledMmadQ = TiledMMA<MmaAtom, Layout<Shape<_2, _4, _1>>, Tile<_32, _64, _16>>;")
        w.line()
        w.comment("Shared memory: 8 × 64 swizzled atoms; the transposed operands are views (no data moves).")
        w.line(
            "using SmemLayoutAtom = decltype(composition(Swizzle<3, 3, 3>{}, "
            "Layout<Shape<_8, _64>, Stride<_64, _1>>{}));"
        )
        w.line(
            "using SmemLayoutQdO = decltype(tile_to_shape(SmemLayoutAtom{}, "
            "Shape<Int<kBlockM>, Int<kHeadDim>>{}));"
        )
        w.line(
            "using SmemLayoutKV = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));"
        )
        w.line(
            "using SmemLayoutPdS = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockM>, Int<kBlockN>>{}));"
        )
        for t, base, rows, cols in (
            ("QdOt", "SmemLayoutQdO", "kHeadDim", "kBlockM"),
            ("Kt", "SmemLayoutKV", "kHeadDim", "kBlockN"),
            ("PdSt", "SmemLayoutPdS", "kBlockN", "kBlockM"),
        ):
            w.line(
                f"using SmemLayout{t} = decltype(composition({base}{{}}, "
                f"make_layout(Shape<Int<{rows}>, Int<{cols}>>{{}}, GenRowMajor{{}})));"
            )
            w.line(f"using SmemLayout{t}NoSwizzle = decltype(get_nonswizzle_portion(SmemLayout{t}{{}}));")
        w.line()
        w.line(
            "using GmemTiledCopy = decltype(make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>, "
            "Element>{},"
        )
        w.line("    Layout<Shape<Int<kNThreads / 8>, _8>, Stride<_8, _1>>{}, Layout<Shape<_1, _8>>{}));")
        w.line("using SmemCopyAtom = Copy_Atom<SM75_U32x4_LDSM_N, Element>;  // ldmatrix")
        w.line("using SmemCopyAtomT = Copy_Atom<SM75_U16x8_LDSM_T, Element>;  // ldmatrix.trans: the ᵀ views")
        w.line("using SmemCopyAtomPdS = Copy_Atom<AutoVectorizingCopyWithAssumedAlignment<32>, Element>;")
    w.line()


def _emit_helpers(w: CodeWriter) -> None:
    with w.block("namespace tl", "}  // namespace tl"):
        w.line("using namespace cute;")
        w.line()
        w.comment("The m16n8 accumulator of one thread seen as (rows, cols).")
        w.line("template <class Layout>")
        with w.block("CUTE_DEVICE constexpr auto acc_rowcol(Layout acc)"):
            w.line("auto l = logical_divide(acc, Shape<_2>{});  // ((2, 2), MMA_M, MMA_N)")
            w.line(
                "return make_layout(make_layout(get<0, 1>(l), get<1>(l)), "
                "make_layout(get<0, 0>(l), get<2>(l)));"
            )
        w.line()
        emit_row_helpers(w, regions=False)
        w.line()
        emit_region_helpers(w)
        w.comment(
            "acc += A·B with both operands in shared memory, ldmatrix of slice k + 1 under the MMAs of k."
        )
        w.line("template <class Mma, class Acc, class RA, class RB, class SA, class SB, class CA, class CB>")
        with w.block(
            "CUTE_DEVICE void gemm_ss(Mma& mma, Acc& acc, RA& tCrA, RB& tCrB, SA const& tCsA, SB const& tCsB,"
            " CA const& copy_a, CB const& copy_b)"
        ):
            w.line("Tensor tCrA_view = copy_a.get_thread_slice(threadIdx.x).retile_D(tCrA);")
            w.line("Tensor tCrB_view = copy_b.get_thread_slice(threadIdx.x).retile_D(tCrB);")
            w.line("cute::copy(copy_a, tCsA(_, _, 0), tCrA_view(_, _, 0));")
            w.line("cute::copy(copy_b, tCsB(_, _, 0), tCrB_view(_, _, 0));")
            w.line("CUTE_UNROLL")
            with w.block("for (int k = 0; k < size<2>(tCrA); ++k)"):
                with w.block("if (k + 1 < size<2>(tCrA))"):
                    w.line("cute::copy(copy_a, tCsA(_, _, k + 1), tCrA_view(_, _, k + 1));")
                    w.line("cute::copy(copy_b, tCsB(_, _, k + 1), tCrB_view(_, _, k + 1));")
                w.line("cute::gemm(mma, tCrA(_, _, k), tCrB(_, _, k), acc);")
        w.line()
        emit_row_copy_helpers(w)
    w.line()


def emit_row_copy_helpers(w: CodeWriter) -> None:
    """`tl::cp_async_f32` (the rows' LSE and D into shared memory) and `tl::warp_sum`, inside `namespace tl`
    (the sm_90 backward emits them too)."""
    w.comment("One float global → shared through cp.async (4 bytes, in the caller's commit group).")
    with w.block("CUTE_DEVICE void cp_async_f32(float* dst, float const* src)"):
        w.line(
            'asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\\n" :: "r"(cute::cast_smem_ptr_to_uint(dst)), '
            '"l"(src));'
        )
    w.line()
    w.comment("A warp's sum (kLanes: of each group of that many adjacent lanes), for the gradients of side")
    w.comment("tensors read once per (batch, head) and the D kernel's rows.")
    w.line("template <int kLanes = 32>")
    with w.block("CUTE_DEVICE float warp_sum(float x)"):
        w.line("CUTE_UNROLL")
        w.line("for (int o = kLanes / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffff, x, o);")
        w.line("return x;")
    w.line()
    w.comment("keep ? x : 0 as one select, so x (a masked score's exp2) is computed for every score and")
    w.comment("discarded, never branched around (a branch a score in the masked loop otherwise)")
    with w.block("CUTE_DEVICE float select_kept(bool keep, float x)"):
        w.line("float r;")
        w.line(
            'asm("{\\n .reg .pred p;\\n setp.ne.b32 p, %2, 0;\\n selp.f32 %0, %1, 0f00000000, p;\\n}\\n" '
            ': "=f"(r) : "f"(x), "r"(int(keep)));'
        )
        w.line("return r;")
    w.line()
    w.comment("Two 16-bit values as one 32-bit word, a in the low half (the lower address).")
    w.line("template <class T>")
    with w.block("CUTE_DEVICE uint32_t pack2(T a, T b)"):
        w.line("return uint32_t(a.raw()) | (uint32_t(b.raw()) << 16);")


def _params(
    w: CodeWriter,
    name: str,
    base: tuple[tuple[str, str, str], ...],
    extra: list[tuple[str, str, str]],
    *,
    threads: int = THREADS,
) -> None:
    params = [f"{c} {n}" for n, c, _ in base] + [f"{c} {n}" for n, c, _ in extra]
    bounds = f"{threads}" if threads == THREADS else f"{threads}, 1"
    w.line(f'extern "C" __global__ void __launch_bounds__({bounds}) {name}(')
    for p in params[:-1]:
        w.line(f"    {p},")
    w.line(f"    {params[-1]}) {{")


def _grad_ptr(name: str) -> str:
    return f"{name}_grad"


def preprocess_lanes(head_dim: int) -> int:
    """The D kernel's lanes a row: the most, up to a warp, that share a row's 16-byte pieces evenly (the
    backward's head dims are multiples of 64, so at least 8: a warp's 32 / lanes rows a step fit the 4
    rows a warp takes)."""
    pieces = head_dim // 8
    return next(n for n in (32, 16, 8) if pieces % n == 0)


def _emit_preprocess(
    w: CodeWriter, plan: KernelPlan, sink_partials: list[tuple[Load, Expr]], tail: list[tuple[str, str, str]]
) -> None:
    ir = plan.ir
    _params(w, f"{plan.kernel_name}_bwd_dot_do_o", BACKWARD_PREPROCESS_PARAMS, [*tail, *BACKWARD_PREPROCESS_ZERO_PARAMS])
    with w.indent():
        w.line(f"using Element = {ELEMENT[plan.dtype]};")
        w.line(f"constexpr int kHeadDim = {plan.head_dim_qk};")
        w.line(f"constexpr int kRows = {PREPROCESS_ROWS};")
        w.line("const int bidb = blockIdx.y, bidh = blockIdx.z;")
        w.line("const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;")
        w.line(
            "const Element* o_ptr = static_cast<const Element*>(o) + bidb * o_batch_stride + bidh * o_head_stride;"
        )
        w.line(
            "const Element* do_ptr = static_cast<const Element*>(dout) + bidb * do_batch_stride + bidh * do_head_stride;"
        )
        w.line("const long long row_base = (static_cast<long long>(bidb) * heads + bidh) * seqlen_q;")
        w.line("const int bidh_kv = bidh / (heads / heads_kv);")
        w.comment("dq_accum's rows of this block cleared for the dQ/dK/dV kernel's additions (every slice; the")
        w.comment("grid covers its dq_rows, the query tiles' whole rows, past seqlen_q)")
        with w.block("for (int s = 0; s < dq_slices; ++s)"):
            w.line(
                "float4* zero = reinterpret_cast<float4*>(dq_accum + ((static_cast<long long>(s) * batch + bidb) * heads "
                "+ bidh) * dq_rows * kHeadDim) + blockIdx.x * kRows * (kHeadDim / 4);"
            )
            w.line("const int n = min(kRows, dq_rows - static_cast<int>(blockIdx.x) * kRows) * (kHeadDim / 4);")
            w.line("for (int i = threadIdx.x; i < n; i += blockDim.x) zero[i] = make_float4(0.f, 0.f, 0.f, 0.f);")
        reg = Regions(ir)
        if sink_partials:
            assert ir.sink is not None
            w.line(f"const float sink = {reg.c(ir.sink)};")
            for i, _ in enumerate(sink_partials):
                w.line(f"float tl_g{i} = 0.f;  // this warp's share of the sink's gradient")
        lanes = preprocess_lanes(plan.head_dim_qk)
        w.comment(f"{lanes} lanes a row, 16 bytes a lane at a time: {32 // lanes} rows a warp step, their loads in flight together")
        w.comment("(element by element where O's or dO's rows are not 16-byte aligned)")
        w.line(f"constexpr int kLanes = {lanes};")
        w.line("constexpr int kChunk = 16 / sizeof(Element);")
        w.line(
            "const bool whole = (reinterpret_cast<uintptr_t>(o_ptr) | reinterpret_cast<uintptr_t>(do_ptr) | "
            "(o_row_stride | do_row_stride) * sizeof(Element)) % 16 == 0;"
        )
        w.line("CUTE_UNROLL")
        with w.block("for (int i = 0; i < kRows / 8; i += 32 / kLanes)"):
            w.line("const int row = blockIdx.x * kRows + warp * (kRows / 8) + i + lane / kLanes;")
            w.line("const bool row_in = row < seqlen_q;")
            w.line("float acc = 0.f;")
            with w.block("if (row_in && whole)", "} else if (row_in) {"):
                w.line("CUTE_UNROLL")
                with w.block("for (int c = lane % kLanes * kChunk; c < kHeadDim; c += kLanes * kChunk)"):
                    w.line("const uint4 a = *reinterpret_cast<const uint4*>(o_ptr + row * o_row_stride + c);")
                    w.line("const uint4 b = *reinterpret_cast<const uint4*>(do_ptr + row * do_row_stride + c);")
                    w.line("const Element* ea = reinterpret_cast<const Element*>(&a);")
                    w.line("const Element* eb = reinterpret_cast<const Element*>(&b);")
                    w.line("CUTE_UNROLL")
                    w.line("for (int e = 0; e < kChunk; ++e) acc += static_cast<float>(ea[e]) * static_cast<float>(eb[e]);")
            with w.indent(), w.block("for (int c = lane % kLanes * kChunk; c < kHeadDim; c += kLanes * kChunk)"):
                w.line("CUTE_UNROLL")
                with w.block("for (int e = 0; e < kChunk; ++e)"):
                    w.line(
                        "acc += static_cast<float>(o_ptr[row * o_row_stride + c + e]) * "
                        "static_cast<float>(do_ptr[row * do_row_stride + c + e]);"
                    )
            w.line("}")
            w.line("acc = tl::warp_sum<kLanes>(acc);  // the row's lanes")
            w.line("if (row_in && lane % kLanes == 0) dpsum[row_base + row] = acc;")
            if sink_partials:
                w.comment("∂L/∂sink = −Σ_rows exp(sink − LSE) · D (the sink's weight times the row's D)")
                w.line(f"const float l = row_in ? lse[row_base + row] : {POS_INF};")
                w.line(f"const float p_sink = l == {POS_INF} ? 0.f : tl::exp2_approx((sink - l) * {LOG2E});")
                for i, (_, g) in enumerate(sink_partials):
                    w.line(f"tl_g{i} -= p_sink * acc * ({reg.c(g)});")
        if sink_partials:
            w.comment("the warp's rows: each row's lanes hold the same sum, so add across the row groups")
            for i, _ in enumerate(sink_partials):
                w.line(f"for (int o = kLanes; o < 32; o <<= 1) tl_g{i} += __shfl_xor_sync(0xffffffff, tl_g{i}, o);")
        for i, (ld, _) in enumerate(sink_partials):
            w.line(f"if (lane == 0) atomicAdd(&{_grad_ptr(ld.tensor)}[{reg._offset(ld)}], tl_g{i});")
    w.line("}")
    w.line()


def _emit_convert(
    w: CodeWriter,
    plan: KernelPlan,
    dq_vector: int = 1,
    *,
    groups: int = 1,
    swapped: bool = False,
    scaled: bool = False,
    coords: str = "",
) -> None:
    """dq_accum → dQ, in the order the dQ/dK/dV kernel adds its fragment in. `dq_vector` (v): that many
    consecutive fragment elements go in one vector atomic (4: sm_90's float4 reductions; 1: sm_80's
    scalars); `groups`: the tile is that many contiguous parts, one per group of kNThreads / groups
    threads (sm_90: a warp group's own part, which it hands to a bulk copy alone; 1: one part). With
    n = size / v vectors a thread and g, u = thread t's group and rank in it, t's element i is at
    ((g · n + i / v) · (kNThreads / groups) + u) · v + i % v, which for one group is
    (i / v · kNThreads + t) · v + i % v. `swapped`: its dQ MMA computes dQᵀ, (kHeadDim, kBlockM).
    `scaled`: dS left out the softmax scale (`scale_folded_grad`), dQ takes it here, from the parameter
    `BACKWARD_CONVERT_SCALE_PARAM` after the others. A thread reads its elements v at a time (coalesced:
    the warp's vectors are consecutive) and writes them, rounded, into a padded tile in shared memory;
    dQ is then stored from there in 16-byte row pieces (2-byte scatters straight from the fragment took
    the convert to five times cuDNN's time on the H200: docs/results/2026-12-04-h200-backward-kernels-d128.log)."""
    params = (*BACKWARD_CONVERT_PARAMS, BACKWARD_CONVERT_SCALE_PARAM) if scaled else BACKWARD_CONVERT_PARAMS
    _params(w, f"{plan.kernel_name}_bwd_convert_dq", params, [])
    with w.indent():
        w.line(f"using Traits = {plan.kernel_name}_bwd_traits;")
        w.line("using Element = Traits::Element;")
        w.line("constexpr int kBlockM = Traits::kBlockM;")
        w.line("constexpr int kHeadDim = Traits::kHeadDim;")
        w.line("const int m_block = blockIdx.x, bidb = blockIdx.y, bidh = blockIdx.z;")
        w.line("const int m_blocks = cute::ceil_div(seqlen_q, kBlockM);")
        w.line(f"const long long slice = {DQ_SLICE};")
        w.line(
            "const float* src = dq_accum + ((static_cast<long long>(bidb) * heads + bidh) * m_blocks + m_block) * "
            "(kBlockM * kHeadDim);"
        )
        w.line("Element* dst = static_cast<Element*>(dq) + bidb * dq_batch_stride + bidh * dq_head_stride;")
        v = dq_vector
        w.comment(
            f"the tile is in the dQ MMA's fragment order, {v} element(s) a vector, in {groups} part(s) of "
            f"kNThreads / {groups} threads: thread t's element i is at"
        )
        w.comment(f"((t / kGroup · n + i / {v}) · kGroup + t % kGroup) · {v} + i % {v}, n = {v}-vectors a thread")
        w.line("typename Traits::TiledMmadQ tiled_mma_dq;")
        m, n, row, col = ("kHeadDim", "kBlockM", 1, 0) if swapped else ("kBlockM", "kHeadDim", 0, 1)
        identity = f"make_identity_tensor(Shape<Int<{m}>, Int<{n}>>{{}})"
        note = "  // dQᵀ: (column, row)" if swapped else ""
        if coords:  # the traits' thrfrg_C layout (the sm_90 skeleton's), CuTe's slice of it
            w.line(
                f"Tensor tdQcdQ = tl::partition_C(tiled_mma_dq.get_thread_slice(threadIdx.x), {identity}, "
                f"typename Traits::{coords}{{}});{note}"
            )
        else:
            w.line(f"Tensor tdQcdQ = tiled_mma_dq.get_thread_slice(threadIdx.x).partition_C({identity});{note}")
        w.line(f"constexpr int kGroup = Traits::kNThreads / {groups};")
        w.line(f"constexpr int kVectors = decltype(size(tdQcdQ))::value / {v};")
        w.line("const int group = threadIdx.x / kGroup, rank = threadIdx.x % kGroup;")
        w.comment(
            "the fragment scattered over the tile: through shared memory, so that dQ is stored in whole "
            "16-byte row pieces; a row's pad of 16 bytes"
        )
        w.comment(
            "shifts the next by four banks, so a warp's fragment stores (8 rows · 4 column pairs) meet no conflict"
        )
        w.line("constexpr int kChunk = 16 / sizeof(Element);")
        w.line("__shared__ alignas(16) Element sdQ[kBlockM][kHeadDim + kChunk];")
        w.line("CUTE_UNROLL")
        if v not in (1, 4):
            raise ValueError(f"dq_vector {v}: the convert reads 1 or 4 floats at a time")
        vec, zero = ("float4", "make_float4(0.f, 0.f, 0.f, 0.f)") if v == 4 else ("float", "0.f")
        with w.block("for (int j = 0; j < kVectors; ++j)"):
            w.line(f"{vec} acc = {zero};")
            at = (
                f"((group * kVectors + j) * kGroup + rank) * {v}"
                if v > 1
                else "(group * kVectors + j) * kGroup + rank"
            )
            w.comment("the splits in order: the same sum every run")
            with w.block("for (int s = 0; s < dq_splits; ++s)"):
                if v == 4:
                    w.line(f"const float4 x = *reinterpret_cast<const float4*>(src + s * slice + {at});")
                    w.line("acc.x += x.x; acc.y += x.y; acc.z += x.z; acc.w += x.w;")
                else:
                    w.line(f"acc += src[s * slice + {at}];")
            scale = " * softmax_scale" if scaled else ""
            for u in range(v):
                value = ("acc.x", "acc.y", "acc.z", "acc.w")[u] if v == 4 else "acc"
                i = f"j * {v} + {u}" if v > 1 else "j"
                w.line(
                    f"sdQ[get<{row}>(tdQcdQ({i}))][get<{col}>(tdQcdQ({i}))] = static_cast<Element>({value}{scale});"
                )
        w.line("__syncthreads();")
        w.line("constexpr int kRowChunks = kHeadDim / kChunk;")
        w.line("const int rows = min(kBlockM, seqlen_q - m_block * kBlockM);")
        w.line("Element* dst_tile = dst + static_cast<long long>(m_block) * kBlockM * dq_row_stride;")
        w.line(
            "const bool whole = (reinterpret_cast<uintptr_t>(dst_tile) | dq_row_stride * sizeof(Element)) % 16 == 0;"
            "  // else (a strided dQ) element by element"
        )
        with w.block("if (whole)", "} else {"):
            w.line("CUTE_UNROLL")
            with w.block("for (int c = threadIdx.x; c < kBlockM * kRowChunks; c += Traits::kNThreads)"):
                w.line("const int r = c / kRowChunks, k = c % kRowChunks * kChunk;")
                w.line(
                    "if (r < rows) *reinterpret_cast<uint4*>(dst_tile + r * dq_row_stride + k) = "
                    "*reinterpret_cast<const uint4*>(&sdQ[r][k]);"
                )
        with w.indent(), w.block("for (int c = threadIdx.x; c < kBlockM * kHeadDim; c += Traits::kNThreads)"):
            w.line("const int r = c / kHeadDim, k = c % kHeadDim;")
            w.line("if (r < rows) dst_tile[r * dq_row_stride + k] = sdQ[r][k];")
        w.line("}")
    w.line("}")
    w.line()


def emit_dkdv_accumulators(w: CodeWriter, layout: str | None = None) -> None:
    """dK and dV of the key block in fp32 registers, cleared before the loop over the group's heads
    (both skeletons; `layout`: the traits' written-out fragment layout, else CuTe's partition)."""
    for acc in ("acc_dk", "acc_dv"):
        if layout:
            w.line(f"Tensor {acc} = make_tensor<float>(typename Traits::{layout}{{}});  // (kBlockN, kHeadDim)")
        else:
            w.line(f"Tensor {acc} = partition_fragment_C(tiled_mma_dkv, Shape<Int<kBlockN>, Int<kHeadDim>>{{}});")
    w.line("clear(acc_dk);")
    w.line("clear(acc_dv);")
    w.line()
    w.comment("every query head of the group, so dK and dV are summed over it in registers")


def _emit_main(
    w: CodeWriter,
    plan: KernelPlan,
    partials: list[tuple[Load, Expr]],
    tail: list[tuple[str, str, str]],
    deterministic: bool,
) -> None:
    ir = plan.ir
    reg = Regions(ir)
    softmax = ir.normalizer == "softmax"
    _params(w, f"{plan.kernel_name}_bwd_dq_dk_dv", BACKWARD_PARAMS, tail)
    T = f"{plan.kernel_name}_bwd_traits"
    with w.indent():
        _emit_main_aliases(w, T)
        w.line("extern __shared__ __align__(128) char smem[];")
        _emit_block_indices(w)
        w.comment("Shared memory: K and V of this key block, P and dS, then two stages of (Q, dO): the next")
        w.comment("query block's Q and dO load while this one computes (FA2's double buffer).")
        w.line(
            "Tensor sK = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(smem)), typename Traits::SmemLayoutKV{});"
        )
        w.line("Tensor sV = make_tensor(sK.data() + size(sK), typename Traits::SmemLayoutKV{});")
        w.line("Tensor sP = make_tensor(sV.data() + size(sV), typename Traits::SmemLayoutPdS{});")
        w.line("Tensor sdS = make_tensor(sP.data() + size(sP), typename Traits::SmemLayoutPdS{});")
        w.line("Element* smem_qdo = (sdS.data() + size(sdS)).get();")
        w.line("constexpr int kQdOElems = 2 * kBlockM * kHeadDim;  // one stage: Q then dO")
        w.line(
            "float* smem_rows = reinterpret_cast<float*>(smem_qdo + 2 * kQdOElems);  // per stage: LSE, then D"
        )
        _emit_qdo_views(w, "smem_qdo")
        for t, base, lay in (("sKt", "sK", "Kt"), ("sPt", "sP", "PdSt"), ("sdSt", "sdS", "PdSt")):
            w.line(f"Tensor {t} = make_tensor({base}.data(), typename Traits::SmemLayout{lay}{{}});")
            w.line(
                f"Tensor {t}NoSwizzle = make_tensor({base}.data().get(), typename Traits::SmemLayout{lay}NoSwizzle{{}});"
            )
        w.line()
        _emit_gmem_copy(w)
        w.comment("The three tiled MMAs and their shared → register copies")
        w.line("typename Traits::TiledMmaSdP tiled_mma_sdp;")
        w.line("auto thr_mma_sdp = tiled_mma_sdp.get_thread_slice(tidx);")
        w.line("Tensor tSrQ = thr_mma_sdp.partition_fragment_A(sQ);")
        w.line("Tensor tSrK = thr_mma_sdp.partition_fragment_B(sK);")
        w.line("Tensor tdPrdO = thr_mma_sdp.partition_fragment_A(sdO);")
        w.line("Tensor tdPrV = thr_mma_sdp.partition_fragment_B(sV);")
        w.line(
            "auto smem_tiled_copy_QdO = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, tiled_mma_sdp);"
        )
        w.line("auto smem_tiled_copy_KV = make_tiled_copy_B(typename Traits::SmemCopyAtom{}, tiled_mma_sdp);")
        w.line("auto smem_thr_copy_QdO = smem_tiled_copy_QdO.get_thread_slice(tidx);")
        w.line("Tensor tSsK = smem_tiled_copy_KV.get_thread_slice(tidx).partition_S(sK);")
        w.line("Tensor tdPsV = smem_tiled_copy_KV.get_thread_slice(tidx).partition_S(sV);")
        w.line()
        w.line("typename Traits::TiledMmadKV tiled_mma_dkv;")
        w.line("auto thr_mma_dkv = tiled_mma_dkv.get_thread_slice(tidx);")
        w.line("Tensor tdVrPt = thr_mma_dkv.partition_fragment_A(sPtNoSwizzle);")
        w.line("Tensor tdVrdO = thr_mma_dkv.partition_fragment_B(sdOtNoSwizzle);")
        w.line("Tensor tdKrdSt = thr_mma_dkv.partition_fragment_A(sdStNoSwizzle);")
        w.line("Tensor tdKrQt = thr_mma_dkv.partition_fragment_B(sQtNoSwizzle);")
        w.line(
            "auto smem_tiled_copy_PdSt = make_tiled_copy_A(typename Traits::SmemCopyAtomT{}, tiled_mma_dkv);"
        )
        w.line(
            "auto smem_tiled_copy_QdOt = make_tiled_copy_B(typename Traits::SmemCopyAtomT{}, tiled_mma_dkv);"
        )
        w.line("Tensor tdVsPt = smem_tiled_copy_PdSt.get_thread_slice(tidx).partition_S(sPt);")
        w.line("Tensor tdKsdSt = smem_tiled_copy_PdSt.get_thread_slice(tidx).partition_S(sdSt);")
        w.line("auto smem_thr_copy_QdOt = smem_tiled_copy_QdOt.get_thread_slice(tidx);")
        w.line()
        w.line("typename Traits::TiledMmadQ tiled_mma_dq;")
        w.line("auto thr_mma_dq = tiled_mma_dq.get_thread_slice(tidx);")
        w.line("Tensor tdQrdS = thr_mma_dq.partition_fragment_A(sdS);")
        w.line("Tensor tdQrKt = thr_mma_dq.partition_fragment_B(sKtNoSwizzle);")
        w.line("auto smem_tiled_copy_dS = make_tiled_copy_A(typename Traits::SmemCopyAtom{}, tiled_mma_dq);")
        w.line("auto smem_tiled_copy_Kt = make_tiled_copy_B(typename Traits::SmemCopyAtomT{}, tiled_mma_dq);")
        w.line("Tensor tdQsdS = smem_tiled_copy_dS.get_thread_slice(tidx).partition_S(sdS);")
        w.line("Tensor tdQsKt = smem_tiled_copy_Kt.get_thread_slice(tidx).partition_S(sKt);")
        w.line(
            "Tensor tdQcdQ = thr_mma_dq.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));"
        )
        w.line()
        w.comment("P and dS: registers → shared memory, in the input dtype")
        w.line(
            "auto smem_tiled_copy_PdS = make_tiled_copy_C(typename Traits::SmemCopyAtomPdS{}, tiled_mma_sdp);"
        )
        w.line("auto smem_thr_copy_PdS = smem_tiled_copy_PdS.get_thread_slice(tidx);")
        w.line("Tensor tPsP = smem_thr_copy_PdS.partition_D(sP);")
        w.line("Tensor tdSsdS = smem_thr_copy_PdS.partition_D(sdS);")
        w.line(
            "Tensor tScS = thr_mma_sdp.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));"
        )
        w.line()
        _emit_dq_slice(w, deterministic)
        w.line("CUTE_NO_UNROLL")
        with w.block("for (int n_block = blockIdx.x; n_block < n_blocks; n_block += gridDim.x)"):
            _emit_key_block(w, reg, softmax, partials, deterministic)
    w.line("}")
    w.line()


def _emit_main_aliases(w: CodeWriter, traits: str) -> None:
    """The dQ/dK/dV kernel's names for its traits' tiles."""
    w.line(f"using Traits = {traits};")
    w.line("using Element = Traits::Element;")
    w.line("constexpr int kBlockM = Traits::kBlockM;")
    w.line("constexpr int kBlockN = Traits::kBlockN;")
    w.line("constexpr int kHeadDim = Traits::kHeadDim;")


def _emit_block_indices(
    w: CodeWriter, *, key_major: bool = False, heavy_columns: int = 0, head_sections: bool = False
) -> None:
    """The thread block's coordinates: (key block column, batch, K/V head) and the GQA group size.
    `key_major`: the grid's blocks taken key column first (`grid_col`): the thread blocks of every (batch,
    head) for one key block column are launched together, so where masks give the first key blocks the
    most query rows (sink tokens, a prefix, causal) those start first instead of one head's at a time.
    `heavy_columns` (without `key_major`): only the first that many key columns of every (batch, head) go
    first, key column first among them; the rest keep the head-major order (one head's Q, dO and dQ in L2
    at a time). `head_sections` (with `key_major`): key column first within sections of (batch, K/V head)s
    whose Q, dO and dq_accum fit in `L2_SECTION_BYTES`, one section after another: the longest columns of
    a section start first, and the section's rows stay in L2 (FA3's longest-processing-time order)."""
    w.line("const int tidx = threadIdx.x;")
    w.line("const int n_blocks = cute::ceil_div(seqlen_k, kBlockN);")
    if heavy_columns and not key_major:
        w.comment(f"the first {heavy_columns} key column(s) of every head first, then head-major")
        w.line("const int tile = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);")
        w.line("const int heads_all = gridDim.y * gridDim.z;")
        w.line(f"const int heavy = min({heavy_columns}, static_cast<int>(gridDim.x));")
        w.line("const int rest = gridDim.x - heavy;")
        w.line("const bool first = tile < heavy * heads_all;")
        w.line("const int bh = first ? tile % heads_all : (tile - heavy * heads_all) / rest;")
        w.line("const int grid_col = first ? tile / heads_all : heavy + (tile - heavy * heads_all) % rest;")
        w.line("const int bidh_kv = bh % gridDim.z;  // K/V head: the loop below visits each query head of its group")
        w.line("const int bidb = bh / gridDim.z;")
    elif key_major and head_sections:
        w.comment("sections of heads that fit in L2 (Q and dO in 2 bytes, dq_accum in 4, a row of each of the group's")
        w.comment("query heads), one after another; key block column first within a section (longest first)")
        w.line("const int tile = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);")
        w.line("const int heads_all = gridDim.y * gridDim.z;")
        w.line("const long long head_bytes = static_cast<long long>(seqlen_q) * kHeadDim * 8 * (heads / heads_kv);")
        w.line(
            f"const int section = static_cast<int>(max(1LL, min(static_cast<long long>(heads_all), "
            f"{L2_SECTION_BYTES}LL / max(1LL, head_bytes))));"
        )
        w.line("const int first = tile / (section * gridDim.x) * section;  // the section's first (batch, head)")
        w.line("const int in_section = min(section, heads_all - first);")
        w.line("const int grid_col = (tile - first * gridDim.x) / in_section;")
        w.line("const int bh = first + (tile - first * gridDim.x) % in_section;")
        w.line("const int bidh_kv = bh % gridDim.z;  // K/V head: the loop below visits each query head of its group")
        w.line("const int bidb = bh / gridDim.z;")
    elif key_major:
        w.comment("key block columns outermost: every head's first key blocks start first (longest first)")
        w.line("const int tile = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);")
        w.line("const int bidh_kv = tile % gridDim.z;  // K/V head: the loop below visits each query head of its group")
        w.line("const int bidb = (tile / gridDim.z) % gridDim.y;")
        w.line("const int grid_col = tile / (gridDim.y * gridDim.z);")
    else:
        w.line("const int bidb = blockIdx.y;")
        w.line("const int bidh_kv = blockIdx.z;  // K/V head: the loop below visits each query head of its group")
    w.line("const int group = heads / heads_kv;")
    w.line()


def grid_col(key_major: bool) -> str:
    """The thread block's key block column (`_emit_block_indices`)."""
    return "grid_col" if key_major else "blockIdx.x"


def _emit_dq_slice(w: CodeWriter, deterministic: bool, col: str = "blockIdx.x") -> None:
    """`m_blocks` and `dq_slice`, where this thread block adds its dQ (its own slice when deterministic)."""
    w.line("const int m_blocks = cute::ceil_div(seqlen_q, kBlockM);")
    if deterministic:
        w.comment(
            "this grid column's slice of dq_accum: only its thread block adds into it, in program order"
        )
        w.line(f"float* dq_slice = dq_accum + {col} * ({DQ_SLICE});")
    else:
        w.line("float* dq_slice = dq_accum;  // atomics from every key block (the grid has one column each)")
    w.line()


def _emit_key_block(
    w: CodeWriter,
    reg: Regions,
    softmax: bool,
    partials: list[tuple[Load, Expr]],
    deterministic: bool,
) -> None:
    """One key block: its K and V into shared memory, dK and dV over every query block of its group's
    heads, dQ's share added into dq_slice, dK and dV stored."""
    _emit_load_kv(w, deterministic)
    emit_dkdv_accumulators(w)
    with w.block("for (int g = 0; g < group; ++g)"):
        summed = _emit_group_head(w, reg, softmax, partials)
        w.line("CUTE_NO_UNROLL")
        with w.block("for (int m_block = m_block_min; m_block < m_block_max; )"):
            w.line("const int next = next_m_block(m_block);")
            w.line("const bool masked = block_class(m_block) == 1;")
            w.line("cute::cp_async_wait<0>();  // this block's Q and dO (and, the first time, K and V)")
            w.line("__syncthreads();")
            w.line("if (next < m_block_max) load_QdO(next, stage ^ 1);  // overlaps this block's compute")
            w.line("cute::cp_async_fence();")
            _emit_qdo_views(w, "smem_qdo + stage * kQdOElems")
            w.line("Tensor tSsQ = smem_thr_copy_QdO.partition_S(sQ);")
            w.line("Tensor tdPsdO = smem_thr_copy_QdO.partition_S(sdO);")
            w.line("Tensor tdVsdOt = smem_thr_copy_QdOt.partition_S(sdOt);")
            w.line("Tensor tdKsQt = smem_thr_copy_QdOt.partition_S(sQt);")
            w.comment("S = Q·Kᵀ (raw scores) and dP = dO·Vᵀ")
            w.line("Tensor acc_s = partition_fragment_C(tiled_mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});")
            w.line(
                "Tensor acc_dp = partition_fragment_C(tiled_mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});"
            )
            w.line("clear(acc_s);")
            w.line("clear(acc_dp);")
            w.line(
                "tl::gemm_ss(tiled_mma_sdp, acc_s, tSrQ, tSrK, tSsQ, tSsK, smem_tiled_copy_QdO, smem_tiled_copy_KV);"
            )
            w.line(
                "tl::gemm_ss(tiled_mma_sdp, acc_dp, tdPrdO, tdPrV, tdPsdO, tdPsV, smem_tiled_copy_QdO, "
                "smem_tiled_copy_KV);"
            )
            _emit_scores(w, reg, softmax, partials)
            w.line("Tensor rP = tl::convert_fragment<Element>(acc_s);")
            w.line("Tensor rdS = tl::convert_fragment<Element>(acc_dp);")
            w.line("cute::copy(smem_tiled_copy_PdS, smem_thr_copy_PdS.retile_S(rP), tPsP);")
            w.line("cute::copy(smem_tiled_copy_PdS, smem_thr_copy_PdS.retile_S(rdS), tdSsdS);")
            w.line("__syncthreads();")
            w.comment("dV += Pᵀ·dO")
            w.line(
                "tl::gemm_ss(tiled_mma_dkv, acc_dv, tdVrPt, tdVrdO, tdVsPt, tdVsdOt, smem_tiled_copy_PdSt, "
                "smem_tiled_copy_QdOt);"
            )
            w.comment(
                "dQ += dS·K: this key block's share, added to the fp32 accumulator before dK's GEMM, so"
            )
            w.comment("the atomics drain under it")
            w.line(
                "Tensor acc_dq = partition_fragment_C(tiled_mma_dq, Shape<Int<kBlockM>, Int<kHeadDim>>{});"
            )
            w.line("clear(acc_dq);")
            w.line(
                "tl::gemm_ss(tiled_mma_dq, acc_dq, tdQrdS, tdQrKt, tdQsdS, tdQsKt, smem_tiled_copy_dS, smem_tiled_copy_Kt);"
            )
            w.comment("in fragment order, so a warp's 32 additions cover 128 contiguous bytes (rows past")
            w.comment("seqlen_q add zeros into the tile's padding)")
            w.line("float* dq_tile = dq_head + m_block * (kBlockM * kHeadDim) + tidx;")
            w.line("CUTE_UNROLL")
            w.line(
                "for (int i = 0; i < size(acc_dq); ++i) atomicAdd(dq_tile + i * Traits::kNThreads, acc_dq(i));"
            )
            w.comment("dK += dSᵀ·Q")
            w.line(
                "tl::gemm_ss(tiled_mma_dkv, acc_dk, tdKrdSt, tdKrQt, tdKsdSt, tdKsQt, smem_tiled_copy_PdSt, "
                "smem_tiled_copy_QdOt);"
            )
            w.line("__syncthreads();  // the next block overwrites P and dS, and prefetches into this stage")
            w.line("stage ^= 1;")
            w.line("m_block = next;")
        _emit_group_tail(w, reg, partials, summed)
    w.line()
    _emit_store_dkv(w, scaled=scale_folded_grad(reg.ir)[0])


def _emit_gmem_copy(w: CodeWriter) -> None:
    """mK and mV of the key/value head, the 16-byte cp.async tiled copy, its coordinates and `load_rows`
    (a tile's rows inside the sequence copied, the rest zeroed)."""
    w.comment("K and V of this key block: loaded once, rows past seqlen_k zeroed")
    for t, ptr in (("K", "k"), ("V", "v")):
        w.line(
            f"Tensor m{t} = make_tensor(make_gmem_ptr(static_cast<Element const*>({ptr}) + bidb * {ptr}_batch_stride"
            f" + bidh_kv * {ptr}_head_stride), make_shape(seqlen_k, Int<kHeadDim>{{}}), "
            f"make_stride({ptr}_row_stride, _1{{}}));"
        )
    w.line("typename Traits::GmemTiledCopy gmem_tiled_copy_QKV;")
    w.line("auto gmem_thr_copy_QKV = gmem_tiled_copy_QKV.get_thread_slice(tidx);")
    w.line(
        "Tensor tKVcKV = gmem_thr_copy_QKV.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));"
    )
    w.line(
        "Tensor tQcQ = gmem_thr_copy_QKV.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));"
    )
    w.line("auto load_rows = [&](auto const& src, auto& dst, auto const& coords, int rows) {")
    w.line("  CUTE_UNROLL")
    w.line("  for (int m = 0; m < size<1>(dst); ++m) {")
    w.line(
        "    if (get<0>(coords(0, m, 0)) < rows) cute::copy(gmem_tiled_copy_QKV, src(_, m, _), dst(_, m, _));"
    )
    w.line("    else cute::clear(dst(_, m, _));")
    w.line("  }")
    w.line("};")


def _emit_load_kv(w: CodeWriter, deterministic: bool) -> None:
    """K and V of key block n_block into shared memory through cp.async (one commit group)."""
    if deterministic:
        w.line("cute::cp_async_wait<0>();  // the previous key block's loads, and its readers, are done")
        w.line("__syncthreads();")
    w.comment("K and V of this key block: rows past seqlen_k zeroed")
    with w.block(""):
        for t in ("K", "V"):
            w.line(
                f"Tensor g{t} = local_tile(m{t}, Shape<Int<kBlockN>, Int<kHeadDim>>{{}}, make_coord(n_block, 0));"
            )
        w.line("const int kv_rows = seqlen_k - n_block * kBlockN;")
        w.line("Tensor tKgK = gmem_thr_copy_QKV.partition_S(gK);")
        w.line("Tensor tKsK = gmem_thr_copy_QKV.partition_D(sK);")
        w.line("Tensor tVgV = gmem_thr_copy_QKV.partition_S(gV);")
        w.line("Tensor tVsV = gmem_thr_copy_QKV.partition_D(sV);")
        w.line("load_rows(tKgK, tKsK, tKVcKV, kv_rows);")
        w.line("load_rows(tVgV, tVsV, tKVcKV, kv_rows);")
        w.line("cute::cp_async_fence();")


def _emit_group_head(
    w: CodeWriter,
    reg: Regions,
    softmax: bool,
    partials: list[tuple[Load, Expr]],
    *,
    loads: str = "all",
) -> list[int]:
    """Inside the loop over the group's query heads: the uniforms, the block classes and the query-block
    range, the head's Q / dO views and `load_QdO` (Q, dO and the rows' LSE and D of block m into a stage),
    the first block's load. Returns the partials each thread sums (`_thread_summed`). `loads`: "all";
    "none" without `load_QdO` (the sm_90 producer's walks and consumers: the producer loads by TMA)."""
    w.line("const int bidh = bidh_kv * group + g;")
    _emit_uniforms(w, reg, partials)
    _emit_block_class(w, reg)
    summed = _thread_summed(reg.ir, partials)
    for i in summed:
        w.line(f"float tl_g{i} = 0.f;  // Σ dX · ∂X/∂{partials[i][0].tensor}[…] over this thread's scores")
    w.line(
        "Tensor mQ = make_tensor(make_gmem_ptr(static_cast<Element const*>(q) + bidb * q_batch_stride + "
        "bidh * q_head_stride), make_shape(seqlen_q, Int<kHeadDim>{}), make_stride(q_row_stride, _1{}));"
    )
    w.line(
        "Tensor mdO = make_tensor(make_gmem_ptr(static_cast<Element const*>(dout) + bidb * do_batch_stride + "
        "bidh * do_head_stride), make_shape(seqlen_q, Int<kHeadDim>{}), make_stride(do_row_stride, _1{}));"
    )
    w.line("const long long row_base = (static_cast<long long>(bidb) * heads + bidh) * seqlen_q;")
    w.line(
        "float* dq_head = dq_slice + (static_cast<long long>(bidb) * heads + bidh) * m_blocks * (kBlockM * kHeadDim);"
    )
    if loads == "none":
        _emit_next_m_block(w)
        return summed
    w.comment("Q and dO of query block m into stage `stage` (rows past seqlen_q zeroed)")
    with w.block("auto load_QdO = [&](int m, int stage)", "};"):
        _emit_qdo_views(w, "smem_qdo + stage * kQdOElems", views=False)
        w.line(
            "Tensor tQgQ = gmem_thr_copy_QKV.partition_S(local_tile(mQ, Shape<Int<kBlockM>, "
            "Int<kHeadDim>>{}, make_coord(m, 0)));"
        )
        w.line(
            "Tensor tdOgdO = gmem_thr_copy_QKV.partition_S(local_tile(mdO, Shape<Int<kBlockM>, "
            "Int<kHeadDim>>{}, make_coord(m, 0)));"
        )
        w.line("Tensor tQsQ = gmem_thr_copy_QKV.partition_D(sQ);")
        w.line("Tensor tdOsdO = gmem_thr_copy_QKV.partition_D(sdO);")
        w.line("load_rows(tQgQ, tQsQ, tQcQ, seqlen_q - m * kBlockM);")
        w.line("load_rows(tdOgdO, tdOsdO, tQcQ, seqlen_q - m * kBlockM);")
        if softmax:
            w.comment("the rows' LSE and D ride in the same commit group, so the score loop reads them from")
            w.comment("shared memory (read from global right after the GEMMs, they stalled every exp2)")
            with w.block("if (tidx < kBlockM && m * kBlockM + tidx < seqlen_q)"):
                w.line("float* rows = smem_rows + stage * 2 * kBlockM;")
                w.line("tl::cp_async_f32(rows + tidx, lse + row_base + m * kBlockM + tidx);")
                w.line("tl::cp_async_f32(rows + kBlockM + tidx, dpsum + row_base + m * kBlockM + tidx);")
    _emit_next_m_block(w)
    w.line("int stage = 0;")
    w.line("if (m_block_min < m_block_max) load_QdO(m_block_min, 0);")
    w.line("cute::cp_async_fence();")
    return summed


def _emit_next_m_block(w: CodeWriter) -> None:
    w.line(
        "auto next_m_block = [&](int m) { do { ++m; } while (m < m_block_max && block_class(m) == 0); return m; };"
    )


def _emit_group_tail(
    w: CodeWriter, reg: Regions, partials: list[tuple[Load, Expr]], summed: list[int]
) -> None:
    """After a query head's blocks: the thread-summed gradients added once, the head's uniforms dropped."""
    for i in summed:
        ld = partials[i][0]
        w.line(f"tl_g{i} = tl::warp_sum(tl_g{i});")
        w.line(f"if (tidx % 32 == 0) atomicAdd(&{_grad_ptr(ld.tensor)}[{reg._offset(ld)}], tl_g{i});")
    drop_head_temps(reg)


def drop_head_temps(reg: Regions) -> None:
    """The head's hoisted uniforms, out of scope after its blocks."""
    for n in [n for n, t in reg.temps.items() if t.startswith("tl_u")]:
        del reg.temps[n]


def _emit_store_dkv(w: CodeWriter, *, scaled: bool = False) -> None:
    """dK and dV of the key block from `acc_dk` / `acc_dv` (partitioned by `thr_mma_dkv`) to global memory
    (the sm_90 backward's go through shared memory: `sm90_bwd._emit_store_dkv_shared`). `scaled`: dS
    left out the softmax scale (`scale_folded_grad`), dK takes it here."""
    w.comment("dK and dV of this key block (rows past seqlen_k are not stored)")
    if scaled:
        w.line("CUTE_UNROLL")
        w.line("for (int i = 0; i < size(acc_dk); ++i) acc_dk(i) *= softmax_scale;  // dS left it out")
    w.line(
        "Tensor tdKVcdKV = thr_mma_dkv.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));"
    )
    w.line("Tensor rdK = tl::convert_fragment<Element>(acc_dk);")
    w.line("Tensor rdV = tl::convert_fragment<Element>(acc_dv);")
    w.line("Element* dk_ptr = static_cast<Element*>(dk) + bidb * dk_batch_stride + bidh_kv * dk_head_stride;")
    w.line("Element* dv_ptr = static_cast<Element*>(dv) + bidb * dv_batch_stride + bidh_kv * dv_head_stride;")
    w.line("CUTE_UNROLL")
    with w.block("for (int i = 0; i < size(rdK); ++i)"):
        w.line("const int row = n_block * kBlockN + get<0>(tdKVcdKV(i));")
        w.line("const int col = get<1>(tdKVcdKV(i));")
        with w.block("if (row < seqlen_k)"):
            w.line("dk_ptr[row * dk_row_stride + col] = rdK(i);")
            w.line("dv_ptr[row * dv_row_stride + col] = rdV(i);")


def _emit_qdo_views(w: CodeWriter, base: str, *, views: bool = True) -> None:
    """sQ and sdO (and with `views` their transposed and unswizzled views) of one stage of the Q/dO
    buffer."""
    w.line(f"Tensor sQ = make_tensor(make_smem_ptr({base}), typename Traits::SmemLayoutQdO{{}});")
    w.line("Tensor sdO = make_tensor(sQ.data() + size(sQ), typename Traits::SmemLayoutQdO{});")
    if views:
        for t, src in (("sQt", "sQ"), ("sdOt", "sdO")):
            w.line(f"Tensor {t} = make_tensor({src}.data(), typename Traits::SmemLayoutQdOt{{}});")
            w.line(
                f"Tensor {t}NoSwizzle = make_tensor({src}.data().get(), typename Traits::SmemLayoutQdOtNoSwizzle{{}});"
            )


def _score(ir: Forward) -> Expr:
    """The score region as the kernels compute it: divisions by uniform values become hoisted
    reciprocals (`kernel_ir.passes.reassociate`, as in the forward), and its derivative is taken of this
    form, so both agree to the ulp."""
    return passes.reassociate(ir.score)


SOFTMAX_SCALE = Var("softmax_scale", F32)


def scale_folded_grad(ir: Forward) -> tuple[bool, Expr]:
    """(folded, rest): where the score region's derivative dX/ds is the softmax scale times `rest` (the
    plain kernel's and every affine mask's is the scale alone, rest 1), dS is computed as dX · rest and
    the scale is applied once at the ends instead of once a score: to dK before its store
    (`_emit_store_dkv`) and to dQ in the convert kernel, which then takes `softmax_scale`
    (`BackwardSpec.dq_scale`). (False, dX/ds) otherwise."""
    deriv = grad.derivative(_score(ir))
    factors, stack = [], [deriv]
    while stack:
        e = stack.pop()
        if isinstance(e, Op) and e.op == "mul":
            stack += reversed(e.args)
        else:
            factors.append(e)
    if SOFTMAX_SCALE not in factors:
        return False, deriv
    factors.remove(SOFTMAX_SCALE)
    # the per-score factors, then the uniform ones as one product (one hoisted value, one multiply a score)
    uniform = [f for f in factors if passes.level(f) == "uniform"]
    rest: Expr = Const(1.0, F32)
    for group in ([f for f in factors if f not in uniform], uniform):
        part: Expr | None = None
        for f in group:
            part = f if part is None else Op("mul", (part, f), F32)
        if part is not None:
            rest = part if rest == Const(1.0, F32) else Op("mul", (rest, part), F32)
    return True, rest


def _thread_summed(ir: Forward, partials: list[tuple[Load, Expr]]) -> list[int]:
    """Uniform reads whose gradient each thread sums and adds once per head: those without a softmax
    (with one, `sm80_bwd_rows` sums them per row)."""
    corrected = row_corrected(ir, partials)
    return [i for i, (ld, _) in enumerate(partials) if passes.level(ld) == "uniform" and i not in corrected]


def _emit_uniforms(w: CodeWriter, reg: Regions, partials: list[tuple[Load, Expr]]) -> None:
    roots = _roots(reg, partials)
    reg.hoist(w, roots, "uniform", prefix="tl_u")


def _roots(reg: Regions, partials: list[tuple[Load, Expr]]) -> list[Expr]:
    ir = reg.ir
    score = _score(ir)
    roots: list[Expr] = [score, scale_folded_grad(ir)[1], *reg.masks]
    if reg.fold is not None:
        roots.append(reg.fold)
    if ir.output_scale is not None:
        roots.append(ir.output_scale)
    roots += [g for _, g in partials]
    return roots


# query blocks a step of the coarse trim (`_emit_block_class`): a key block's range of kept query blocks
# found in ~seqlen / (TRIM_SPAN · kBlockM) + TRIM_SPAN tests a side instead of ~seqlen / kBlockM (the
# sliding window's scans were about 14 % of its executed instructions at 16k, in serial loops:
# docs/results/2026-12-04-h200-ncu-backward-sliding-window.txt)
TRIM_SPAN = 16


def _emit_block_class(w: CodeWriter, reg: Regions) -> None:
    """`block_class(m_block)` of the key block's query blocks (0 empty, 1 masked per score, 2 whole) and
    `m_block_min` … `m_block_max`, the range without the empty blocks at its ends: interval tests over
    TRIM_SPAN blocks at once while their union is empty, then one a block (a bisection over runs, as the
    forward's, measured 25 % slower on the dilated window and no faster on the others:
    docs/results/2026-12-03-h200-variants-backward-block-classes.json), or from the launch-time classes
    eight at a time."""
    bc = passes.block_class(reg.ir.masks)
    with w.block("auto block_class = [&](int m_block) -> int", "};"):
        if reg.ir.block_mask:
            w.comment("masks over per-token side tensors: classified at launch at this kernel's tiles")
            w.comment("(`_bwd_block_mask`, (batch, heads or 1, m_blocks, n_blocks) bytes)")
            w.line(f"return {block_mask_read(reg.ir, 'm_blocks', 'n_blocks')};")
        else:
            emit_block_rectangle(w)
            w.line(f"if ({reg.c(bc.never)}) return 0;")
            w.line(f"return ({reg.c(bc.always)}) && (n_block + 1) * kBlockN <= seqlen_k ? 2 : 1;")
    w.line("int m_block_min = 0, m_block_max = m_blocks;")
    if reg.ir.block_mask:
        emit_trim_by_probes(w, "m_block_min", "m_block_max")
    elif reg.ir.masks:
        with w.block("auto blocks_empty = [&](int m_first, int m_end) -> bool", "};"):
            w.comment("query blocks [m_first, m_end) keep no score: the same test over their union")
            emit_block_rectangle(w, q_first="m_first", q_end="m_end")
            w.line(f"return {reg.c(bc.never)};")
        w.comment(f"the range: skip empty blocks at both ends, {TRIM_SPAN} a step where their union keeps no")
        w.comment("score (a narrow band's key block sees a few of hundreds), then one at a time")
        for cond, step in (
            (f"blocks_empty(m_block_max - {TRIM_SPAN}, m_block_max)", f"m_block_max -= {TRIM_SPAN}"),
            (f"blocks_empty(m_block_min, m_block_min + {TRIM_SPAN})", f"m_block_min += {TRIM_SPAN}"),
        ):
            w.line(f"while (m_block_max - m_block_min >= {TRIM_SPAN} && {cond}) {step};")
    w.line("while (m_block_max > m_block_min && block_class(m_block_max - 1) == 0) --m_block_max;")
    w.line("while (m_block_min < m_block_max && block_class(m_block_min) == 0) ++m_block_min;")


def _emit_scores(
    w: CodeWriter,
    reg: Regions,
    softmax: bool,
    partials: list[tuple[Load, Expr]],
    *,
    transposed: bool = False,
    wait_dp: Callable[[], None] | None = None,
) -> None:
    """P and dS on every score of the block: P = exp(X − LSE) (or X), dS = dX · dX/ds. A block whose
    scores are all kept and whose rows are all inside seqlen_q takes a copy of the loop without the
    per-score mask and bounds selects (FA2's unmasked path). `transposed`: the accumulators hold Sᵀ and
    dPᵀ (key rows, the sm_90 kernel's), seen through `tl::acc_colrow` as (query rows, key columns), and
    `coords` gives (key, query). `wait_dp`: the scores run in two passes, P from S alone (dP's GEMM may
    still be writing acc_dp), then what `wait_dp` emits (the wait for dP), then dS from P, read back from
    acc_s; only for programs whose dX/ds, masks and partials do not read the raw score
    (`overlap_blockers`), since P has overwritten it by then."""
    view = "tl::acc_colrow" if transposed else "tl::acc_rowcol"
    w.comment("X, dX/ds and the masks per score; P overwrites S and dS overwrites dP in place")
    w.line(f"Tensor scores = make_tensor(acc_s.data(), {view}(acc_s.layout()));")
    w.line(f"Tensor dscores = make_tensor(acc_dp.data(), {view}(acc_dp.layout()));")
    w.line(f"Tensor coords = make_tensor(tScS.data(), {view}(tScS.layout()));")
    if reg.diagonal is not None:
        shape = "Shape<Int<kBlockN>, Int<kBlockM>>" if transposed else "Shape<Int<kBlockM>, Int<kBlockN>>"
        w.line(f"Tensor tScS0 = tiled_mma_sdp.get_thread_slice(0).partition_C(make_identity_tensor({shape}{{}}));")
        w.line(f"Tensor coords0 = make_tensor(tScS0.data(), {view}(tScS0.layout()));  // thread 0's: constants")
    if softmax:
        w.line("const float* rows_s = smem_rows + stage * 2 * kBlockM;  // this block's LSE, then D")
        if transposed:
            w.comment("this thread's query rows: the wgmma accumulator's columns 2 · (lane % 4) + (r % 2) + 8 · (r / 2)")
            w.comment("(one N tile: static_assert), so their LSE and D are read as float2 pairs at offsets fixed")
            w.comment("at compile time from the thread's first row")
            w.line(
                'static_assert(decltype(size<0, 2>(scores))::value == 1, "query rows: one wgmma N tile");'
            )
            w.line("const float* rows_t = rows_s + get<1>(coords(0, 0));")
    phases = ("both",) if wait_dp is None else ("p", "ds")
    for phase in phases:
        if phase == "ds":
            assert wait_dp is not None
            wait_dp()
        if phase != "both":
            w.comment(
                "pass 1: P from S alone, into acc_s (acc_dp is not read: dP's GEMM may still run)"
                if phase == "p"
                else "pass 2: dS from dP and the P of pass 1 (the masks again: the same keep as pass 1)"
            )
        with w.block("if (!masked && (m_block + 1) * kBlockM <= seqlen_q)"):
            _emit_score_rows(
                w, reg, softmax, partials, every_score_kept=True, transposed=transposed, phase=phase
            )
        with w.block("else"):
            _emit_score_rows(
                w, reg, softmax, partials, every_score_kept=False, transposed=transposed, phase=phase
            )


def overlap_blockers(ir: Forward, partials: list[tuple[Load, Expr]]) -> list[str]:
    """What dS's pass of a two-pass `_emit_scores` would read of the raw score s, which P has
    overwritten by then: the score region's derivative (softcap's 1 − tanh², sigmoid's σ(1 − σ)), a
    mask, the output scale, a learnable read's partial. Empty: the two passes are exact."""
    named = [("dX/ds", grad.derivative(_score(ir))), *((f"mask `{text(m)}`", m) for m in ir.masks)]
    if ir.output_scale is not None:
        named.append(("the output scale", ir.output_scale))
    named += [(f"∂X/∂{ld.tensor}[…]", g) for ld, g in partials]

    def short(e: Expr) -> str:
        t = text(e)
        return t if len(t) <= 80 else t[:77] + "..."

    return [f"{what} = {short(e)}" for what, e in named if any(n == grad.S for n in walk(e))]


def _emit_score_rows(
    w: CodeWriter,
    reg: Regions,
    softmax: bool,
    partials: list[tuple[Load, Expr]],
    *,
    every_score_kept: bool,
    transposed: bool = False,
    phase: str = "both",
) -> None:
    """`phase` (`_emit_scores`' passes): "both" P and dS in one loop, "p" P alone (reads S, writes P into
    it), "ds" dS alone (reads the P that "p" left in S, and dP)."""
    ir = reg.ir
    q_of, k_of = ("get<1>", "get<0>") if transposed else ("get<0>", "get<1>")
    score = _score(ir)
    _, deriv = scale_folded_grad(ir)
    roots = _roots(reg, partials)
    if phase == "p":  # what P needs: the score and the masks (no derivative, no partials)
        roots = [score, *reg.masks, *([ir.output_scale] if ir.output_scale is not None else [])]
    elif phase == "ds":  # no score: it is gone (P overwrote it), and `overlap_blockers` says none reads it
        roots = [r for r in roots if r is not score]
    diagonal = None if every_score_kept else reg.diagonal
    if diagonal is not None:
        roots = [r for r in roots if r not in reg.masks]
        _emit_diagonal_limits(w, reg, diagonal, q_of, k_of)
    arrays = reg.col_arrays(roots)
    if arrays:
        w.line("constexpr int kCols = decltype(size<1>(scores))::value;")
        emit_key_arrays(w, reg, arrays, k_of)
    w.line("CUTE_UNROLL")
    with w.block("for (int r = 0; r < size<0>(scores); ++r)"):
        w.line(f"const int row = m_block * kBlockM + {q_of}(coords(r, 0));")
        w.line(f"const bool row_in = {'true' if every_score_kept else 'row < seqlen_q'};")
        if softmax and transposed:
            for name, off, pick, default, what in (
                ("lse_log2", "", f"{{}} * {LOG2E}", POS_INF, "p"),
                ("d_row", "kBlockM + ", "{}", "0.f", "ds"),
            ):
                if phase == ("ds" if what == "p" else "p"):
                    continue
                w.line(f"const float2 {name}2 = *reinterpret_cast<const float2*>(rows_t + {off}8 * (r >> 1));")
                value = pick.format(f"(r & 1 ? {name}2.y : {name}2.x)")
                w.line(f"const float {name} = row_in ? {value} : {default};")
        elif softmax:
            w.line(f"const int r_local = {q_of}(coords(r, 0));")
            if phase != "ds":
                w.line(f"const float lse_log2 = row_in ? rows_s[r_local] * {LOG2E} : {POS_INF};")
            if phase != "p":
                w.line("const float d_row = row_in ? rows_s[kBlockM + r_local] : 0.f;  // rowsum(dO ∘ O)")
        reg.hoist(w, roots, "row", prefix="tl_r")
        corrected = row_corrected(ir, partials) if phase != "p" else []
        if corrected:
            w.comment("this thread's keys of the row: Σ P, Σ P·dP and, per read, Σ P·g and Σ P·dP·g")
            w.line("float tl_ps = 0.f, tl_pdp = 0.f;")
            for i in corrected:
                w.line(f"float tl_pg{i} = 0.f, tl_pdpg{i} = 0.f;  // g = ∂X/∂{partials[i][0].tensor}[…]")
        if ir.output_scale is not None and not softmax:
            w.line(f"const float o_scale = {reg.c(ir.output_scale)};")
        w.line("CUTE_UNROLL")
        with w.block("for (int c = 0; c < size<1>(scores); ++c)"):
            w.line(f"const int col = n_block * kBlockN + {k_of}(coords(r, c));")
            reg.hoist(w, roots, "elem", prefix="tl_e")
            if diagonal is not None:
                w.comment("the score's offsets from this thread's first score: thread 0's, constants")
                w.line(f"const int tl_qo = {q_of}(coords0(r, c)) - {q_of}(coords0(0, 0));")
                w.line(f"const int tl_ko = {k_of}(coords0(r, c)) - {k_of}(coords0(0, 0));")
            if phase != "ds":
                w.line(f"const float x = {reg.c(score)};")
            with_dx_ds = deriv != Const(1.0, F32)  # a factor left per score after the folded scale
            if phase != "p" and with_dx_ds:
                w.line(f"const float dx_ds = {reg.c(deriv)};  // the score region's derivative (scale_folded_grad)")
            if diagonal is not None:
                sides = "".join(
                    f" && tl_ko - tl_qo {'<=' if upper else '>='} tl_kq_{'hi' if upper else 'lo'}"
                    for upper in _directions(diagonal)
                )
                w.line(f"const bool keep = tl_qo < tl_q_end && tl_ko < tl_k_end{sides};")
            elif every_score_kept:
                w.line("const bool keep = true;")
            else:
                keep_expr = " && ".join(reg.c(m) for m in reg.masks)
                mask = f" && col < seqlen_k && ({keep_expr})" if keep_expr else " && col < seqlen_k"
                w.line(f"const bool keep = row_in && (!masked || (true{mask}));")
            if phase == "p":
                if softmax:
                    w.line(f"scores(r, c) = tl::select_kept(keep, tl::exp2_approx({_exp2_arg(reg)}));")
                else:
                    scale = " * o_scale" if ir.output_scale is not None else ""
                    w.line(f"scores(r, c) = keep ? x{scale} : 0.f;")
            else:
                _emit_score_grads(w, reg, softmax, partials, corrected, phase, with_dx_ds)
        if corrected:
            emit_row_sums(w, corrected, transposed=transposed)
    for n in [n for n, t in reg.temps.items() if t.startswith(("tl_r", "tl_e", "tl_c"))]:
        del reg.temps[n]


def _directions(diagonal: tuple[passes.Diagonal, ...]) -> list[bool]:
    """The sides `diagonal` bounds (`upper`), lower first: each one limit, the tightest of its bounds."""
    return [up for up in (False, True) if any(d.upper is up for d in diagonal)]


def _emit_diagonal_limits(
    w: CodeWriter, reg: Regions, diagonal: tuple[passes.Diagonal, ...], q_of: str, k_of: str
) -> None:
    """The masks as limits on kv_idx − q_idx (`kernel_ir.passes.diagonal_bounds`) and the lengths as limits
    on the rows and keys, once a block, relative to this thread's first score (`tl_q0`, `tl_k0`): a
    score's offsets from it are thread 0's for the same element, constants once the loops unroll, so
    a score's keep is four compares with immediates (FlashAttention 4's per-column row limits), not the
    masks' index arithmetic. A block the masks keep whole (`masked` false: only its rows run past
    seqlen_q) takes limits no offset reaches."""
    w.comment("the masks bound kv_idx − q_idx: the limits on a score's offsets from this thread's first score,")
    w.comment("once a block (64-bit: exact; clamped to ± kBlockM + kBlockN, beyond every offset, they fit an int)")
    w.line(f"const int tl_q0 = m_block * kBlockM + {q_of}(coords(0, 0));")
    w.line(f"const int tl_k0 = n_block * kBlockN + {k_of}(coords(0, 0));")
    w.line("const int tl_q_end = seqlen_q - tl_q0, tl_k_end = seqlen_k - tl_k0;  // rows and keys inside")
    w.line("const long long tl_kq0 = static_cast<long long>(tl_k0) - tl_q0;")
    w.line("constexpr long long tl_span = kBlockM + kBlockN;")
    for upper in _directions(diagonal):
        pick = "cute::min" if upper else "cute::max"
        name, free = ("tl_kq_hi", "tl_span") if upper else ("tl_kq_lo", "-tl_span")
        value = ""
        for o in (o for o in diagonal if o.upper is upper):
            one = linear_c(reg, o.offset)
            if o.unless:  # a side the launch turns off (a negative window)
                one = f"({' || '.join(reg.c(u) for u in o.unless)} ? {free} + tl_kq0 : {one})"
            value = f"{pick}({value}, {one})" if value else one
        limit = f"cute::max(cute::min({value} - tl_kq0, tl_span), -tl_span)"
        w.line(f"const int {name} = static_cast<int>(masked ? {limit} : {free});")


def _exp2_arg(reg: Regions) -> str:
    """P's exponent in log2 units, X · log2(e) − LSE · log2(e); where the score region is `s · m` with m
    uniform (`Regions.fold`), the raw score times the hoisted m · log2(e): one FFMA, as the forward's
    softmax computes it."""
    if reg.fold is not None:
        return f"scores(r, c) * ({reg.scale_log2()}) - lse_log2"
    return f"x * {LOG2E} - lse_log2"


def _emit_score_grads(
    w: CodeWriter,
    reg: Regions,
    softmax: bool,
    partials: list[tuple[Load, Expr]],
    corrected: list[int],
    phase: str,
    with_dx_ds: bool,
) -> None:
    """One score's dX, dS (into dscores) and its learnable reads' shares, P from `x` ("both": P is
    computed here and written over S) or from S ("ds": pass 1 put it there). `with_dx_ds`: dS is dX times
    the `dx_ds` the caller defined (else dX alone: the derivative was the folded scale)."""
    ir = reg.ir
    if softmax:
        if phase == "ds":
            w.line("const float p = scores(r, c);  // pass 1's P (0 where not kept)")
        else:
            w.comment("exp2 of every score, then a select: a masked score's exp2 is discarded, not branched around")
            w.line(f"const float p = tl::select_kept(keep, tl::exp2_approx({_exp2_arg(reg)}));")
        w.line("const float dx = p * (dscores(r, c) - d_row);")
        if corrected:
            w.line("const float pdp = p * dscores(r, c);")
            w.line("tl_ps += p;")
            w.line("tl_pdp += pdp;")
        if phase == "both":
            w.line("scores(r, c) = p;")
    else:
        scale = " * o_scale" if ir.output_scale is not None else ""
        w.line(f"const float dx = keep ? dscores(r, c){scale} : 0.f;")
        if phase == "both":
            w.line(f"scores(r, c) = keep ? x{scale} : 0.f;")
    w.line(f"dscores(r, c) = keep ? dx{' * dx_ds' if with_dx_ds else ''} : 0.f;")
    for i, (ld, g) in enumerate(partials):
        if i in corrected:
            w.line(f"const float g{i} = keep ? {reg.c(g)} : 0.f;")
            w.line(f"tl_pg{i} += p * g{i};")
            w.line(f"tl_pdpg{i} += pdp * g{i};")
        elif passes.level(ld) == "uniform":
            w.line(f"tl_g{i} += keep ? dx * ({reg.c(g)}) : 0.f;")
        else:
            w.line(f"if (keep) atomicAdd(&{_grad_ptr(ld.tensor)}[{reg._offset(ld)}], dx * ({reg.c(g)}));")
