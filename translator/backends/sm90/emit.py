"""The Hopper backend (sm_90a): the same `KernelPlan` as the mma.sync backend → one warp-specialised .cu.

The file reads like FlashAttention 3's forward kernel, written out flat: a header, the includes, one traits
struct (tiles, GMMA shared layouts, the two tiled wgmma), the `tl::` helpers, then the `extern "C"` kernel:

- warp group 0 is the producer: it gives registers back (`setmaxnreg.dec`) and one thread issues every TMA
  load — Q once, then K and V per key block into a `kStages`-deep ring of shared buffers, each buffer
  guarded by a "full" mbarrier (TMA completes its transaction bytes on it) and an "empty" one (consumers
  arrive when their wgmma has read it);
- warp groups 1… are consumers (`setmaxnreg.inc`): S = Q·Kᵀ as an SS wgmma, mask, online softmax, the
  Reshape of P into wgmma A-registers, O += P·V as an RS wgmma; with `overlap`, Q·Kᵀ of the next block is
  issued together with P·V of this one so the softmax runs while the tensor cores work;
- the epilogue divides by the row sum, writes LSE from registers, stages O in shared memory (stmatrix) and
  stores it with TMA.

Every block is tagged `// TL:n` with the TL statement it implements; the TL's steps keep their meaning,
only who runs them (producer or consumer) is the backend's decision.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from runner.abi import (
    ATTENTION_PARAMS,
    INFERENCE_PARAMS,
    TILE_ORDER_ALIGN,
    TMA_PARAMS,
    LaunchSpec,
    program_params,
)
from translator.backends.finish import inference_spec, launch_spec, render
from translator.backends.regions import (
    Regions,
    emit_block_class,
    emit_block_mask_for,
    emit_normalize,
    emit_score_lambda,
    emit_uniforms,
    fma_predicate,
)
from translator.backends.row_helpers import emit_normalize_rows, emit_store_lse
from translator.backends.sm90.config import BOX_COLS, ELEMENT, HopperConfig, hopper_config
from translator.backends.sm90.fragments import coord_layout, static_mode
from translator.backends.sm90.gmma import WGMMA_K, WGMMA_M, GmmaAtom, atom_definitions, pv_atom, qk_atom
from translator.backends.sm90.helpers import emit_helpers
from translator.backends.sm90.tma import emit_tma_tiles
from translator.plan import KernelPlan
from translator.writer import CodeWriter

# The sm_90 kernel takes the attention ABI's parameters and, after them, one TMA descriptor per tensor
# (`CUtensorMap`, 128 bytes, passed by value as `__grid_constant__`; `runner.abi.TMA_PARAMS`), encoded on
# the host by `runner.tma` from the same tensors.
NVRTC_ARCH = "sm_90a"  # wgmma and setmaxnreg exist only on the arch-specific target
# A score fragment seen as (rows, cols) of this thread
SCORES_ROWCOL = "Tensor scores = make_tensor(acc_s.data(), tl::acc_rowcol(acc_s.layout()));  // (rows, cols)"


class _Emit:
    """The writer, the plan and its Hopper config; `tag` opens a block tagged with a TL step's line."""

    def __init__(self, w: CodeWriter, cfg: HopperConfig) -> None:
        self.w, self.cfg, self.plan = w, cfg, cfg.plan
        # The variant's regions; None for the plain forward, whose tuned code stays as measured.
        # A plain forward with `Param fma_exps` takes the regions' path for its exp2 helpers.
        fma = cfg.fma_exps
        # A packed batch (`Param varlen`): per-sequence lengths and offsets from cu_seqlens; side tensors
        # stay laid out by the batch's longest sequence.
        self.varlen = cfg.varlen
        dims = {"seqlen_q": "max_seqlen_q", "seqlen_k": "max_seqlen_k"} if self.varlen else {}
        self.reg = None if cfg.plan.ir.plain and not fma else Regions(cfg.plan.ir, fma_exps=fma, dims=dims)

    def exp2(self, arg: str, col: str = "c") -> str:
        """C of the softmax's exp2 of `arg` in column `col`: on the SFU, or for `fma_exps` of every eight
        columns on the FP32 pipe."""
        if self.reg is None or not self.reg.fma_exps:
            return f"tl::exp2_approx({arg})"
        return f"tl::exp2_on({arg}, {fma_predicate(self.reg.fma_exps, col)})"

    @property
    def by_class(self) -> bool:
        """Mask expressions beyond the `Mask` header: producer and consumers walk the key blocks the
        classification keeps, in the same order."""
        return self.reg is not None and self.plan.ir.header_mask == "expr"

    def region_line(self) -> int | None:
        return self.plan.line_of("score_mod") or self.plan.line_of("mask_expr") or self.plan.line_of("scale")

    def tag(self, kind: str, note: str = "") -> AbstractContextManager[None]:
        s = self.plan.step(kind)
        if s is None:
            line = self.plan.header_lines.get(kind)
            return self.w.tl(line, note if line is not None else "")
        return self.w.tl(s.tl_line, f"{s.text}{'  — ' + note if note else ''}")


def emit_sm90(
    plan: KernelPlan,
    *,
    tl_file: str | None = None,
    line_directives: bool = True,
    consumers: int | None = None,
    overlap: bool | None = None,
    pingpong: bool | None = None,
    persistent: bool | None = None,
) -> tuple[str, LaunchSpec, dict[int, int]]:
    """(source, launch spec, source map CUDA line → TL line) of the Hopper kernel for `plan`.

    `consumers`, `overlap`, `pingpong` and `persistent` default to the plan's (the TL Params or their
    defaults); an explicit value overrides it (experiments). Ping-pong left to the plan is dropped when
    the overrides leave fewer than two overlapped consumer groups for it."""
    n = plan.consumers if consumers is None else consumers
    ov = plan.overlap if overlap is None else overlap
    pp = pingpong if pingpong is not None else plan.pingpong and n >= 2 and ov
    ps = plan.persistent if persistent is None else persistent
    cfg = hopper_config(plan, consumers=n, overlap=ov, pingpong=pp, persistent=ps)
    w = CodeWriter()
    e = _Emit(w, cfg)
    _header(e, tl_file)
    _traits(e)
    emit_helpers(w, regions=e.reg is not None, gmma_desc=True)
    w.line()
    _kernel(e)
    emit_block_mask_for(w, plan)
    source, smap = render(w, plan, tl_file, line_directives)
    launch = launch_spec(
        plan,
        tl_file=tl_file,
        threads=cfg.threads,
        shared_bytes=cfg.smem()["total"],
        arch=NVRTC_ARCH,
        params=tuple(p[0] for p in _base_params(cfg)) + TMA_PARAMS,  # then the program's (finish.py)
        persistent=cfg.persistent,
        inference=inference_spec(plan.inference, None) if plan.inference and cfg.varlen else None,
    )
    return source, launch, smap


def _base_params(cfg: HopperConfig) -> tuple[tuple[str, str, str], ...]:
    """The attention ABI, or the inference ABI for a packed batch (its cu_seqlens and the maxima)."""
    return INFERENCE_PARAMS if cfg.varlen else ATTENTION_PARAMS


def generate(
    plan: KernelPlan, *, tl_file: str | None, line_directives: bool = True
) -> tuple[str, dict[int, int], LaunchSpec]:
    """The backend signature `translator.backends.backend_for` returns (source, map, launch)."""
    source, launch, smap = emit_sm90(plan, tl_file=tl_file, line_directives=line_directives)
    return source, smap, launch


# ---- file scaffolding ------------------------------------------------------------------------------------


def _header(e: _Emit, tl_file: str | None) -> None:
    w, p, c = e.w, e.plan, e.cfg
    src = tl_file or f"{p.kernel_name}.tl"
    w.comment(f"Generated by the TL translator from {src} — edit the TL and rebuild; hand edits are")
    w.comment(
        f"re-verified by `tl run`. Target {p.arch} (built for {NVRTC_ARCH}: TMA, wgmma, setmaxnreg), "
        f"{p.dtype}, mask {p.mask};"
    )
    w.comment(
        f"1 producer + {c.consumers} consumer warp groups, {p.stages}-stage K/V pipeline"
        f"{', intra-warp-group overlap' if c.overlap else ''}{', ping-pong' if c.pingpong else ''}"
        f"{', persistent (one block per SM walks the tiles)' if c.persistent else ''}. "
        "`// TL:n` tags the TL line of each block."
    )
    w.line("#include <cute/tensor.hpp>")
    w.line("#include <cute/arch/copy_sm90.hpp>      // stmatrix")
    w.line("#include <cute/arch/copy_sm90_tma.hpp>  // cp.async.bulk.tensor (TMA) loads and stores")
    w.line("#include <cutlass/arch/barrier.h>       // mbarriers with transaction counts")
    w.line("#include <cutlass/arch/reg_reconfig.h>  // setmaxnreg")
    w.line("#include <cutlass/numeric_conversion.h>")
    w.line()
    w.line("using namespace cute;")
    w.line()
    for line in atom_definitions(*_atoms(p)):  # wgmma N outside CuTe's base shapes (sm90/gmma.py)
        w.line(line)


def _k_major(rows: int, d: int) -> tuple[str, str]:
    """The k16 slices of a K-major (rows × d) tile of 64-column blocks, in 16-byte units: four of
    32 bytes in a block's 128-byte rows, then the next block (rows · 128 bytes on)."""
    if d == BOX_COLS:
        return "_4", "_2"
    return f"Shape<_4, Int<{d // BOX_COLS}>>", f"Stride<_2, Int<{rows * 8}>>"


def _vt_lbo(c: HopperConfig) -> int:
    """Vᵀ's leading byte offset (16-byte units): from one 64-column block of V to the next, BN rows of
    128 bytes; CuTe leaves 0 where d_v is one block."""
    p = c.plan
    return 0 if p.head_dim_v == BOX_COLS else p.block_n * 8


# 128-byte swizzled rows of 16-bit values (GMMA::Layout_K_SW128_Atom's swizzle)
SW128 = "cute::ComposedLayout<cute::Swizzle<3, 4, 3>, cute::smem_ptr_flag_bits<16>, "


def _smem_layout(rows: int, cols: int, stages: int | None = None) -> str:
    """tile_to_shape(GMMA::Layout_K_SW128_Atom, (rows, cols[, stages])): 8-row atoms down the rows, then
    64-column blocks (rows · 64 values apart), then stages."""
    r, rs = static_mode(rows // 8, 512)
    c, cs = static_mode(cols // BOX_COLS, rows * BOX_COLS)
    shape, stride = f"Shape<_8, {r}>, Shape<_64, {c}>", f"Stride<_64, {rs}>, Stride<_1, {cs}>"
    if stages is not None:
        st, sts = static_mode(stages, rows * cols)
        shape, stride = f"{shape}, Shape<_1, {st}>", f"{stride}, Stride<_0, {sts}>"
    return f"{SW128}Layout<Shape<{shape}>, Stride<{stride}>>>"


def _smem_layout_vt(block_n: int, d_v: int, stages: int) -> str:
    """Vᵀ, V's tile_to_shape composed with make_ordered_layout((d_v, BN, s), Step<_2, _1, _3>): the
    64-column blocks (one block: a plain 64), the BN rows, the stages."""
    blocks = d_v // BOX_COLS
    c, cs = (
        ("_64", "_1") if blocks == 1 else (f"Shape<_64, Int<{blocks}>>", f"Stride<_1, Int<{block_n * 64}>>")
    )
    st, sts = static_mode(stages, block_n * d_v)
    return f"{SW128}Layout<Shape<{c}, Int<{block_n}>, {st}>, Stride<{cs}, _64, {sts}>>>"


def _desc_layouts(e: _Emit) -> None:
    """The operands' GMMA descriptor layouts and the accumulators' shapes, written out: what CuTe's
    partition_fragment_A / _B / _C of one warp group derive (tests/translator/test_sm90_desc.py)."""
    w, p, c = e.w, e.plan, e.cfg
    mma_m = c.rows_per_consumer // WGMMA_M
    m_shape, m_stride = static_mode(mma_m, WGMMA_M * c.consumers * 8)
    q_k, q_ks = _k_major(p.block_m, p.head_dim_qk)
    k_k, k_ks = _k_major(p.block_n, p.head_dim_qk)
    ks_shape, ks_stride = static_mode(p.stages, p.block_n * p.head_dim_qk // 8)
    vk_shape, vk_stride = static_mode(p.block_n // WGMMA_K, 128)
    vs_shape, vs_stride = static_mode(p.stages, p.block_n * p.head_dim_v // 8)
    w.comment("The wgmma operands in shared memory as one GMMA descriptor and its steps in 16-byte units")
    w.comment("(MMA, MMA_M or MMA_N, MMA_K[, stage]), as CuTe's partition_fragment_A / _B lay them out for a")
    w.comment("warp group: Q's and K's k16 slices 32 bytes apart in a 128-byte row, then the next 64-column")
    w.comment("block; Vᵀ's 16 rows of V (2 KB) apart; Q's next 64-row wgmma tile 64 · kConsumers rows on.")
    w.line(f"using DescLayoutQ = Layout<Shape<_1, {m_shape}, {q_k}>, Stride<_0, {m_stride}, {q_ks}>>;")
    w.line(
        f"using DescLayoutK = Layout<Shape<_1, _1, {k_k}, Shape<_1, {ks_shape}>>, "
        f"Stride<_0, _0, {k_ks}, Stride<_0, {ks_stride}>>>;"
    )
    w.line(
        f"using DescLayoutVt = Layout<Shape<_1, _1, {vk_shape}, {vs_shape}>, "
        f"Stride<_0, _0, {vk_stride}, {vs_stride}>>;"
    )
    w.comment("The score and output tiles' (row, col)s as thrfrg_C lays out their identity tensors:")
    w.comment("((ThrV, (ThrM, ThrN)), (FrgV, (RestM, RestN))), a wgmma C fragment's thread and value modes")
    w.comment("(ScaledBasis<s, 0> steps rows, <s, 1> columns); tl::partition_C takes the thread's slice.")
    for name, n, atom in (("S", p.block_n, _atoms(p)[0]), ("O", p.head_dim_v, _atoms(p)[1])):
        first, rest = coord_layout(p.block_m, n, atom.n, c.consumers).split("\n")
        w.line(f"using CoordLayout{name} = {first}")
        w.line(f"{rest};")
    w.comment("The accumulators' fragments (partition_fragment_C): ((2 cols, 2 rows, N/8), MMA_M, MMA_N)")
    w.line(f"using AccShapeS = Shape<Shape<_2, _2, Int<kBlockN / 8>>, {m_shape}, _1>;")
    w.line(f"using AccShapeO = Shape<Shape<_2, _2, Int<kHeadDimV / 8>>, {m_shape}, _1>;")
    w.comment("Their layouts (make_tensor's, compact) and P's as the RS wgmma's A operand (what tl::acc_to_A")
    w.comment("derives: ((2, 2, 2) a k16 slice, MMA_M, BN / 16 slices)), written out as for the descriptors.")
    acc_s_m, acc_o_m = static_mode(mma_m, p.block_n // 2)[1], static_mode(mma_m, p.head_dim_v // 2)[1]
    k_shape, k_stride = static_mode(p.block_n // WGMMA_K, 8)
    w.line(f"using AccLayoutS = Layout<AccShapeS, Stride<Stride<_1, _2, _4>, {acc_s_m}, _0>>;")
    w.line(f"using AccLayoutO = Layout<AccShapeO, Stride<Stride<_1, _2, _4>, {acc_o_m}, _0>>;")
    w.line(
        f"using PLayoutA = Layout<Shape<Shape<_2, _2, _2>, {m_shape}, {k_shape}>, "
        f"Stride<Stride<_1, _2, _4>, {acc_s_m}, {k_stride}>>;"
    )
    if c.rows_per_consumer == WGMMA_M:
        w.comment("O's stmatrix (8 × 8, ×4) as make_tiled_copy_C's partition_D / retile_S give it")
        steps, strides = (
            ("_4", "_16")
            if c.boxes_v == 1
            else (f"Shape<_4, Int<{c.boxes_v}>>", f"Stride<_16, Int<{p.block_m * BOX_COLS}>>")
        )
        w.line(
            f"using StsmLayoutO = Layout<Shape<Shape<_8, {steps}>, _1, _1>, "
            f"Stride<Stride<_1, {strides}>, _0, _0>>;"
        )
        w.line(
            f"using StsmLayoutR = Layout<Shape<Shape<_8, Int<{p.head_dim_v // 16}>>, _1, _1>, "
            "Stride<Stride<_1, _8>, _0, _0>>;"
        )


def _atoms(p: KernelPlan) -> tuple[GmmaAtom, GmmaAtom]:
    """(Q·Kᵀ's SS atom, P·V's RS atom) of the plan."""
    return qk_atom(p.dtype, p.block_n), pv_atom(p.dtype, p.head_dim_v)


def _src(e: _Emit, *keys: str) -> str:
    for k in keys:
        line = e.plan.header_lines.get(k)
        if line is not None:
            label = "Dtype" if k == "dtype" else f"Param {k}"
            return f"  // TL:{line} {label}"
    return "  // default"


def _traits(e: _Emit) -> None:
    w, p, c = e.w, e.plan, e.cfg
    sm = c.smem()
    tx = c.tx_bytes()
    name = f"{p.kernel_name}_traits"
    w.comment("Tile constants and layouts: every number comes from a TL Param (line noted) or its default.")
    with w.block(f"struct {name}", "};"):
        w.line(f"using Element = {ELEMENT[p.dtype]};{_src(e, 'dtype')}")
        w.line(f"static constexpr int kBlockM = {p.block_m};{_src(e, 'BM')}")
        w.line(f"static constexpr int kBlockN = {p.block_n};{_src(e, 'BN')}")
        w.line(f"static constexpr int kHeadDimQK = {p.head_dim_qk};{_src(e, 'd_qk', 'd')}")
        w.line(f"static constexpr int kHeadDimV = {p.head_dim_v};{_src(e, 'd_v', 'd')}")
        w.line(
            f"static constexpr int kStages = {p.stages};  // K/V buffers in the TMA pipeline;"
            f"{_src(e, 'stages')[4:]}"
        )
        w.line(
            f"static constexpr int kConsumers = {c.consumers};  // consumer warp groups, "
            f"{c.rows_per_consumer} query rows each{_src(e, 'consumers')[2:].replace('// ', '; ')}"
        )
        w.line("static constexpr int kThreads = 128 * (kConsumers + 1);  // + the producer warp group")
        w.line("static constexpr int kConsumerThreads = 128 * kConsumers;")
        w.line("static constexpr int kConsumerWarps = 4 * kConsumers;")
        w.line(f"static constexpr int kProducerRegs = {c.producer_regs};  // setmaxnreg.dec: TMA needs few")
        w.line(f"static constexpr int kConsumerRegs = {c.consumer_regs};  // setmaxnreg.inc: accumulators")
        w.line(f"static constexpr int kBoxCols = {BOX_COLS};  // a TMA box row: 128 bytes, the swizzle width")
        w.line(
            "static constexpr int kRowsPerThread = 2 * (kBlockM / kConsumers / 64);  "
            "// accumulator rows each consumer thread owns"
        )
        w.line()
        w.comment(
            "Shared memory: 128-byte-swizzled K-major GMMA atoms (8 × 64), the layout TMA's SWIZZLE_128B"
        )
        w.comment(
            "writes; a tile is column blocks of 64, each (rows × 64). Vᵀ is a view of V (no data moves)."
        )
        w.comment("What tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>, (rows, cols[, stages])) and Vᵀ's")
        w.comment("composition with make_ordered_layout((d_v, BN, s), Step<_2, _1, _3>) derive, written out")
        w.comment("(test_sm90_desc.py): ((8 rows, rows / 8), (64 cols, cols / 64)[, stages]).")
        w.line(f"using SmemLayoutQ = {_smem_layout(p.block_m, p.head_dim_qk)};")
        w.line(f"using SmemLayoutK = {_smem_layout(p.block_n, p.head_dim_qk, p.stages)};")
        w.line(f"using SmemLayoutV = {_smem_layout(p.block_n, p.head_dim_v, p.stages)};")
        w.line(f"using SmemLayoutVt = {_smem_layout_vt(p.block_n, p.head_dim_v, p.stages)};  // (d_v, BN, s)")
        w.line(f"using SmemLayoutO = {_smem_layout(p.block_m, p.head_dim_v)};")
        w.line()
        w.comment("S = Q·Kᵀ: SS wgmma (both operands from shared memory, K-major); O += P·V: RS wgmma (P in")
        w.comment(
            "registers, Vᵀ MN-major from shared memory). Consumer warp group g owns rows [g·M/G, (g+1)·M/G)."
        )
        qk, pv = _atoms(p)
        w.comment("The atoms: the widest wgmma N dividing BN (Q·Kᵀ) and d_v (P·V), named (sm90/gmma.py).")
        w.line(f"using TiledMmaQK = decltype(make_tiled_mma({qk.type()}{{}},")
        w.line("    Layout<Shape<Int<kConsumers>, _1, _1>>{}));")
        w.line(f"using TiledMmaPV = decltype(make_tiled_mma({pv.type()}{{}},")
        w.line("    Layout<Shape<Int<kConsumers>, _1, _1>>{}));")
        w.line()
        _desc_layouts(e)
        w.line()
        w.comment("Byte offsets in dynamic shared memory (its base rounded up to 1024 in the kernel).")
        w.line(f"static constexpr int kOffK = {sm['off_k']};")
        w.line(f"static constexpr int kOffV = {sm['off_v']};")
        w.line(
            f"static constexpr int kOffO = {sm['off_o']};  "
            f"// {'O reuses Q’s buffer: Q·Kᵀ is done by then' if c.reuse_q_for_o else 'its own buffer'}"
        )
        w.line(f"static constexpr int kOffBarriers = {sm['off_bar']};")
        w.line(f"static constexpr int kSmemBytes = {sm['total']};  // launch.shared_bytes")
        w.line(f"static constexpr uint32_t kTxQ = {tx['q']};  // bytes one TMA load of each tile brings")
        w.line(f"static constexpr uint32_t kTxK = {tx['k']};")
        w.line(f"static constexpr uint32_t kTxV = {tx['v']};")
    w.line()
    t = name
    w.line(
        f"static_assert(cosize({t}::SmemLayoutQ{{}}) * sizeof({t}::Element) == {t}::kOffK, "
        '"Q fills its buffer exactly");'
    )
    w.line(f"static_assert(cosize({t}::SmemLayoutK{{}}) * sizeof({t}::Element) == {t}::kOffV - {t}::kOffK);")
    w.line(f'static_assert({t}::kBlockN % 16 == 0, "P·V contracts over kBlockN in k16 slices");')
    w.line(
        f"static_assert({t}::kHeadDimQK % {t}::kBoxCols == 0 && {t}::kHeadDimV % {t}::kBoxCols == 0, "
        '"head dims are whole 128-byte TMA boxes");'
    )
    w.line(
        f"static_assert({t}::kBlockM % (64 * {t}::kConsumers) == 0, "
        '"each consumer warp group owns whole 64-row wgmma tiles");'
    )
    w.line()


# ---- the kernel --------------------------------------------------------------------------------------------


def _kernel(e: _Emit) -> None:
    w, p = e.w, e.plan
    params = [f"{ctype} {name}" for name, ctype, _ in _base_params(e.cfg)]
    params += [f"const __grid_constant__ cute::TmaDescriptor {n}" for n in TMA_PARAMS]
    params += [f"{ctype} {name}" for name, ctype, _ in program_params(None if p.ir.plain else p.ir.to_dict())]
    w.line(f'extern "C" __global__ void __launch_bounds__({e.cfg.threads}, 1) {p.kernel_name}(')
    for prm in params[:-1]:
        w.line(f"    {prm},")
    with w.block(f"    {params[-1]})"):
        w.line(f"using Traits = {p.kernel_name}_traits;")
        w.line("using Element = Traits::Element;")
        for k in (
            "kBlockM",
            "kBlockN",
            "kHeadDimQK",
            "kHeadDimV",
            "kStages",
            "kConsumerThreads",
            "kConsumerWarps",
            "kBoxCols",
            "kRowsPerThread",
        ):
            w.line(f"constexpr int {k} = Traits::{k};")
        w.line("using FullBarrier = cutlass::arch::ClusterTransactionBarrier;  // TMA bytes complete it")
        w.line("using EmptyBarrier = cutlass::arch::ClusterBarrier;  // consumers arrive: buffer free")
        w.line()
        w.line("extern __shared__ char smem_raw[];")
        w.line(
            "char* smem = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & "
            "~uintptr_t(1023));"
        )
        w.line("uint64_t* bar_q = reinterpret_cast<uint64_t*>(smem + Traits::kOffBarriers);")
        w.line("uint64_t* empty_q = bar_q + 1;")
        w.line("uint64_t* full_k = bar_q + 2;")
        w.line("uint64_t* full_v = full_k + kStages;")
        w.line("uint64_t* empty_k = full_v + kStages;")
        w.line("uint64_t* empty_v = empty_k + kStages;")
        w.line("Element* smem_q = reinterpret_cast<Element*>(smem);")
        w.line("Element* smem_k = reinterpret_cast<Element*>(smem + Traits::kOffK);")
        w.line("Element* smem_v = reinterpret_cast<Element*>(smem + Traits::kOffV);")
        w.line("Element* smem_o = reinterpret_cast<Element*>(smem + Traits::kOffO);")
        w.line()
        w.line("const int warp_group = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);  // warp-uniform")
        _globals(e)
        masked = e.plan.mask != "none" or _launch_order(e)  # tiles numbered by length, not blockIdx
        if e.cfg.persistent:
            w.comment("Persistent: block b takes tiles b, b + gridDim.x, …; without a mask tile t is")
            w.comment("(m_block, head, batch) with m_block fastest, so the blocks running at once share a")
            w.comment("few heads' K and V in L2")
            w.line("const int num_m_blocks = cute::ceil_div(seqlen_q, kBlockM);")
            w.line("const int num_tiles = num_m_blocks * heads * batch;")
            if masked:
                _tile_numbering(e)
        else:
            if masked:
                w.line("const int num_m_blocks = gridDim.x;")
                w.line("const int tile = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);")
                _tile_numbering(e)
            _tile_coords(e)
        _barrier_init(e)
        with w.block("if (warp_group == 0)"):
            _producer(e)
        with w.block("else", "}"):
            _consumer(e)


def _tile_coords(e: _Emit) -> None:
    """This tile's query block, batch and head, its K/V head and its key-block range."""
    w, p = e.w, e.plan
    if _launch_order(e):
        _launch_order_coords(e)
    elif p.mask != "none":
        _longest_first_coords(e)
    elif e.cfg.persistent:
        w.line("const int bidb = tile / (num_m_blocks * heads);  // batch")
        w.line("const int bidh = tile / num_m_blocks % heads;     // query head")
        w.line("const int m_block = tile % num_m_blocks;  // TL block_m: this tile of query rows")
    else:
        w.line("const int bidb = blockIdx.y;     // batch")
        w.line("const int bidh = blockIdx.z;     // query head")
        w.line("const int m_block = blockIdx.x;  // TL block_m: this tile of query rows")
    _kv_head(e)
    if e.varlen:
        _sequence(e)
    _key_range(e)


def _sequence(e: _Emit) -> None:
    """A packed batch: this tile's sequence, its rows in the packed tensors and its lengths; a query block
    past the sequence's end has nothing to do (the grid covers the longest sequence)."""
    w = e.w
    with e.tag("alloc_q", "packed batch: sequence bidb owns rows cu_seqlens_q[bidb] … of Q and O"):
        w.line("const int q_start = cu_seqlens_q[bidb];")
        w.line("const int seqlen_q = cu_seqlens_q[bidb + 1] - q_start;")
    with e.tag("alloc_k", "and rows cu_seqlens_k[bidb] … of K and V"):
        w.line("const int k_start = cu_seqlens_k[bidb];")
        w.line("const int seqlen_k = cu_seqlens_k[bidb + 1] - k_start;")
    w.line("if (m_block * kBlockM >= seqlen_q) return;  // the whole block leaves, before any barrier")


def _launch_order(e: _Emit) -> bool:
    """Whether the tiles run in the order the launch computed from the block classes (`runner.abi`'s
    TILE_ORDER: most non-empty key blocks first): masks that read side tensors, whose tiles' lengths
    only the classes know (global tokens at the start of a sequence make its first query tile the
    longest, which the longest-first numbering of `_l2_sections` would start last)."""
    return bool(e.plan.ir.block_mask) and not e.varlen


def _tile_numbering(e: _Emit) -> None:
    """What the masked tiles' coordinates are computed from: the launch's order, or the L2 sections."""
    if _launch_order(e):
        w = e.w
        w.comment("The launch's tile order, after the block classes in the same buffer (runner.abi)")
        planes = "heads" if e.plan.ir.block_mask == "per_head" else "1"
        n_blocks = "cute::ceil_div(seqlen_k, kBlockN)"
        w.line(f"const long long tl_classes = 1ll * batch * {planes} * num_m_blocks * {n_blocks};")
        pad = TILE_ORDER_ALIGN - 1
        w.line(
            "const int* tile_order = reinterpret_cast<const int*>("
            f"block_mask_ptr + ((tl_classes + {pad}) & ~{pad}ll));"
        )
    else:
        _l2_sections(e)


def _launch_order_coords(e: _Emit) -> None:
    """Tile `tile`'s coordinates: the launch's order holds (batch · heads + head) · num_m_blocks + m_block."""
    w = e.w
    w.line("const int tl_tile = tile_order[tile];")
    w.line("const int bidb = tl_tile / (heads * num_m_blocks);  // batch")
    w.line("const int bidh = tl_tile / num_m_blocks % heads;  // query head")
    w.line("const int m_block = tl_tile % num_m_blocks;  // TL block_m")


def _l2_sections(e: _Emit) -> None:
    """How many (batch, head) pairs a section of masked tiles spans (FA4's LPT scheduler)."""
    w = e.w
    w.comment("Masked tiles, longest first: the last query tiles see the most keys. Tiles are numbered in")
    w.comment("sections of as many (batch, head) pairs as have K and V fit in 50 MB of L2 (a power of two);")
    w.comment("within a section the longest query tiles of all its heads come first, so the tail is the")
    w.comment("shortest tiles of all (H200, one block per tile: d256 causal +2-9 %, d64 and d128 +0-1 %).")
    w.line("const int num_hb = batch * heads;")
    seqlen_k = "max_seqlen_k" if e.varlen else "seqlen_k"
    w.line(f"const long long kv_head_bytes = 1ll * {seqlen_k} * (kHeadDimQK + kHeadDimV) * sizeof(Element);")
    w.line("int swizzle = 1;")
    w.line("while (swizzle < num_hb && 2 * swizzle * kv_head_bytes <= (50ll << 20)) swizzle *= 2;")


def _longest_first_coords(e: _Emit) -> None:
    """Tile `tile`'s coordinates in the numbering `_l2_sections` describes."""
    w = e.w
    w.line("const int section = tile / (swizzle * num_m_blocks);")
    w.line("const int in_section = tile - section * swizzle * num_m_blocks;")
    w.comment("the last section may hold fewer pairs")
    w.line("const int width = section < num_hb / swizzle ? swizzle : num_hb % swizzle;")
    w.line("const int hb = section * swizzle + in_section % width;")
    w.line("const int bidb = hb / heads;  // batch")
    w.line("const int bidh = hb % heads;  // query head")
    w.line("const int m_block = num_m_blocks - 1 - in_section / width;  // TL block_m")


@contextmanager
def _tile_loop(e: _Emit, who: str) -> Iterator[None]:
    """Persistent: `for` over this block's tiles, each opening with its coordinates; else one tile."""
    w = e.w
    if not e.cfg.persistent:
        yield
        return
    w.line("int tile_iter = 0;  // tiles this block has done: the phase of Q's full/empty barriers")
    w.line("CUTE_NO_UNROLL")
    with w.block("for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x, ++tile_iter)"):
        w.comment(f"{who}: this tile's coordinates")
        _tile_coords(e)
        yield


def _advance_ring(e: _Emit, stage: str = "stage", phase: str = "phase") -> None:
    """Next buffer of a K/V ring; its mbarrier phase flips each time the ring wraps."""
    e.w.line(f"if (++{stage} == kStages) {{ {stage} = 0; {phase} ^= 1; }}")


def _q_phase(e: _Emit) -> str:
    return "tile_iter & 1" if e.cfg.persistent else "0"


def _kv_head(e: _Emit) -> None:
    w, p = e.w, e.plan
    with w.tl(
        p.line_of("group") or p.line_of("heads_kv") or p.line_of("alloc_k"),
        "GQA/MQA: consecutive query heads share one K/V head" if (p.group or p.heads_kv) else "",
    ):
        w.line("const int bidh_kv = bidh / (heads / heads_kv);  // K/V head of this query head")


def _globals(e: _Emit) -> None:
    rows_q, rows_k, batch = ("total_q", "total_k", "1") if e.varlen else ("seqlen_q", "seqlen_k", "batch")
    o_note = (
        "; O leaves through the raw pointer (rows end per sequence)"
        if e.varlen
        else ("; the raw pointers stay unused")
    )
    for kind, what in (
        ("alloc_q", f"tma_q: (d_qk, {rows_q}, heads, {batch}) with the launch's strides"),
        ("alloc_k", f"tma_k: (d_qk, {rows_k}, heads_kv, {batch})"),
        ("alloc_v", f"tma_v: (d_v, {rows_k}, heads_kv, {batch})"),
        ("alloc_o", f"tma_o: (d_v, {rows_q}, heads, {batch}){o_note}"),
    ):
        with e.tag(kind, f"in global memory through its TMA descriptor {what}"):
            pass


def _key_range(e: _Emit) -> None:
    w, p = e.w, e.plan
    w.line()
    with e.tag(
        "loop", "key blocks [n_block_min, n_block_max), walked from the last (producer and consumers agree)"
    ):
        w.line("int n_block_min = 0;")
        w.line("int n_block_max = cute::ceil_div(seqlen_k, kBlockN);")
    if e.by_class:
        emit_block_class(w, e.reg, tag_line=e.plan.line_of("mask_expr"))  # type: ignore[arg-type]
        return
    if p.mask == "none":
        return
    with e.tag("mask", f"Mask {p.mask}: skip key blocks no row of this block can see (bottom-right aligned)"):
        if p.mask == "window":
            w.line("if (window_right >= 0) {")
            w.line(
                "  n_block_max = min(n_block_max, cute::ceil_div("
                "(m_block + 1) * kBlockM + seqlen_k - seqlen_q + window_right, kBlockN));"
            )
            w.line("}")
            w.line("if (window_left >= 0) {")
            w.line(
                "  n_block_min = max(0, (m_block * kBlockM + seqlen_k - seqlen_q - window_left) / kBlockN);"
            )
            w.line("}")
        else:
            w.line(
                "n_block_max = min(n_block_max, "
                "cute::ceil_div((m_block + 1) * kBlockM + seqlen_k - seqlen_q, kBlockN));"
            )


def _barrier_init(e: _Emit) -> None:
    w = e.w
    w.line()
    with e.tag(
        "stages", "mbarriers of the pipeline: Q full; per stage K and V full (TMA) and empty (consumers)"
    ):
        with w.block("if (threadIdx.x == 0)"):
            w.line("cute::prefetch_tma_descriptor(&tma_q);")
            w.line("cute::prefetch_tma_descriptor(&tma_k);")
            w.line("cute::prefetch_tma_descriptor(&tma_v);")
            w.line("cute::prefetch_tma_descriptor(&tma_o);")
            w.line("FullBarrier::init(bar_q, 1);")
            if e.cfg.persistent:
                who = (
                    "1);  // the thread that stored O from Q's buffer"
                    if e.cfg.reuse_q_for_o
                    else "kConsumerThreads);  // after each consumer's last Q·Kᵀ"
                )
                w.line(f"EmptyBarrier::init(empty_q, {who}")
            w.line("CUTE_UNROLL")
            with w.block("for (int s = 0; s < kStages; ++s)"):
                w.line("FullBarrier::init(&full_k[s], 1);")
                w.line("FullBarrier::init(&full_v[s], 1);")
                w.line("EmptyBarrier::init(&empty_k[s], kConsumerWarps);  // one arrive per consumer warp")
                w.line("EmptyBarrier::init(&empty_v[s], kConsumerWarps);")
            w.line("cutlass::arch::fence_barrier_init();")
        w.line("__syncthreads();  // the last block-wide barrier: the warp groups part ways below")


def _tma_tile(e: _Emit, desc: str, bar: str, dst: str, rows: str, boxes: int, row0: str, head: str) -> None:
    """One tile = `boxes` TMA loads of (64 columns × rows), each into its own swizzled column block. A packed
    batch is one (d, total, heads, 1) tensor: `row0` then counts from the sequence's first row."""
    emit_tma_tiles(
        e.w,
        [(desc, dst)],
        bar=bar,
        rows=rows,
        boxes=boxes,
        box_cols="kBoxCols",
        row0=row0,
        head=head,
        batch="0" if e.varlen else "bidb",
    )


def _producer(e: _Emit) -> None:
    w, c = e.w, e.cfg
    w.comment("Producer warp group: registers back to the pool, one thread issues every TMA load.")
    w.line("cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();")
    with w.block("if (threadIdx.x == 0)"):
        across = " (they run on across tiles)" if c.persistent else ""
        with e.tag("loop", "the K and V rings' positions" + across + "; both advance once per key block"):
            w.line("int k_stage = 0, v_stage = 0;")
            w.line("uint32_t k_phase = 0, v_phase = 0;")
        with _tile_loop(e, "producer"):
            _producer_tile(e)


def _producer_tile(e: _Emit) -> None:
    w, c = e.w, e.cfg
    past = "are the next sequence's (their O is not stored)" if e.varlen else "arrive as zeros"
    q_note = f"TMA, once per tile, after the first K; rows past seqlen_q {past}"
    with e.tag("load_q", q_note), w.block("auto load_q = [&]()", "};"):
        if c.persistent:
            what = "stored this tile's O from" if c.reuse_q_for_o else "read"
            w.line(f"EmptyBarrier::wait(empty_q, ({_q_phase(e)}) ^ 1);  // the last tile {what} Q's")
        w.line("FullBarrier::arrive_and_expect_tx(bar_q, Traits::kTxQ);")
        q_row0 = "q_start + m_block * kBlockM" if e.varlen else "m_block * kBlockM"
        _tma_tile(e, "tma_q", "bar_q", "smem_q", "kBlockM", c.boxes_qk, q_row0, "bidh")
    for name, note, tx, boxes, d in (
        (
            "k",
            "wait until the consumers freed the buffer, then TMA into it",
            "kTxK",
            c.boxes_qk,
            "kHeadDimQK",
        ),
        ("v", "its own ring of barriers: Q·Kᵀ may start before V lands", "kTxV", c.boxes_v, "kHeadDimV"),
    ):
        with e.tag(f"load_{name}", note), w.block(f"auto load_{name} = [&](const int n_block)", "};"):
            w.line(f"EmptyBarrier::wait(&empty_{name}[{name}_stage], {name}_phase ^ 1);")
            w.line(f"FullBarrier::arrive_and_expect_tx(&full_{name}[{name}_stage], Traits::{tx});")
            _tma_tile(
                e,
                f"tma_{name}",
                f"&full_{name}[{name}_stage]",
                f"smem_{name} + {name}_stage * kBlockN * {d}",
                "kBlockN",
                boxes,
                "k_start + n_block * kBlockN" if e.varlen else "n_block * kBlockN",
                "bidh_kv",
            )
            _advance_ring(e, f"{name}_stage", f"{name}_phase")
    if e.by_class:
        _producer_by_class(e)
        return
    if not c.overlap:
        with e.tag("loop", "the producer walks the key blocks in the consumers' order: K(n), V(n)"):
            w.line(
                "if (n_block_max <= n_block_min) load_q();  // no key block: the consumers still wait for Q"
            )
            w.line("CUTE_NO_UNROLL")
            with w.block("for (int n_block = n_block_max - 1; n_block >= n_block_min; --n_block)"):
                w.line("load_k(n_block);")
                w.line("if (n_block == n_block_max - 1) load_q();")
                w.line("load_v(n_block);")
        return
    with (
        e.tag(
            "loop",
            "in the consumers' order: they read V(n + 1) after K(n), so V trails K by one block and the "
            "next K never waits for the later-freed V buffer",
        ),
        w.block("if (n_block_max > n_block_min)", "} else {"),
    ):
        w.line("load_k(n_block_max - 1);")
        w.line("load_q();")
        w.line("CUTE_NO_UNROLL")
        with w.block("for (int n_block = n_block_max - 2; n_block >= n_block_min; --n_block)"):
            w.line("load_k(n_block);")
            w.line("load_v(n_block + 1);")
        w.line("load_v(n_block_min);")
    with w.indent(), e.tag("load_q"):
        w.line("load_q();  // no key block: the consumers still wait for Q")
    w.line("}")


def _producer_by_class(e: _Emit) -> None:
    """The consumers' order over the blocks the masks keep (`next_block` skips the empty ones)."""
    w = e.w
    if not e.cfg.overlap:
        with e.tag("loop", "the producer walks the kept key blocks in the consumers' order: K(n), V(n)"):
            w.line(
                "if (n_block_max <= n_block_min) load_q();  // no key block: the consumers still wait for Q"
            )
            w.line("CUTE_NO_UNROLL")
            with w.block(
                "for (int n_block = n_block_max - 1; n_block >= n_block_min; n_block = next_block(n_block))"
            ):
                w.line("load_k(n_block);")
                w.line("if (n_block == n_block_max - 1) load_q();")
                w.line("load_v(n_block);")
        return
    with (
        e.tag("loop", "in the consumers' order over the kept key blocks: V trails K by one block"),
        w.block("if (n_block_max > n_block_min)", "} else {"),
    ):
        w.line("int n_prev = n_block_max - 1;")
        w.line("load_k(n_prev);")
        w.line("load_q();")
        w.line("CUTE_NO_UNROLL")
        with w.block(
            "for (int n_block = next_block(n_prev); n_block >= n_block_min; n_block = next_block(n_block))"
        ):
            w.line("load_k(n_block);")
            w.line("load_v(n_prev);")
            w.line("n_prev = n_block;")
        w.line("load_v(n_prev);")
    with w.indent(), e.tag("load_q"):
        w.line("load_q();  // no key block: the consumers still wait for Q")
    w.line("}")


def _consumer(e: _Emit) -> None:
    w, p = e.w, e.plan
    w.comment("Consumer warp groups: more registers, then the attention of their query rows.")
    w.line("cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();")
    w.line("const int ctid = threadIdx.x - 128;  // thread index among the consumers")
    w.line("Traits::TiledMmaQK tiled_mma_qk;")
    w.line("Traits::TiledMmaPV tiled_mma_pv;")
    w.line("auto thr_mma_qk = tiled_mma_qk.get_thread_slice(ctid);  // this thread's accumulator fragments")
    w.line("auto thr_mma_pv = tiled_mma_pv.get_thread_slice(ctid);")
    w.comment(
        "The shared-memory operands are partitioned by warp group, through a warp-uniform index: ptxas then"
    )
    w.comment(
        "keeps their GMMA descriptors in uniform registers (sliced by thread index, Q's went to regular"
    )
    w.comment("registers and every wgmma paid two R2UR moves)")
    w.line("const int consumer_wg = __shfl_sync(0xffffffff, ctid / 128, 0);  // warp-uniform")
    w.comment("Each operand tile's GMMA descriptors are one descriptor and a layout of 16-byte steps")
    w.comment("(Traits::Desc*), what CuTe's partition_fragment_A / _B of this warp group give")
    w.comment("(tests/translator/test_sm90_desc.py), without instantiating them (about 3 s of nvcc); Q's")
    w.comment("slice at consumer_wg % kConsumers as CuTe's thread layout takes it (the same instructions).")
    w.line()
    with e.tag("q_to_reg", "no ldmatrix on Hopper: wgmma reads Q from shared memory through descriptors"):
        w.line(
            "Tensor tSrQ = make_tensor(GMMA::DescriptorIterator{tl::gmma_desc<GMMA::LayoutType::B128>("
            "smem_q + consumer_wg % Traits::kConsumers * 64 * kBoxCols, 1, 64)},"
        )
        w.line("    Traits::DescLayoutQ{});  // this warp group's 64-row slices (MMA, MMA_M, MMA_K)")
    with e.tag("k_to_reg", "descriptors of every K stage"):
        w.line(
            "Tensor tSrK = make_tensor(GMMA::DescriptorIterator{tl::gmma_desc<GMMA::LayoutType::B128>("
            "smem_k, 1, 64)},"
        )
        w.line("    Traits::DescLayoutK{});  // (MMA, MMA_N, MMA_K, kStages)")
    with e.tag("v_to_reg", "descriptors of Vᵀ, an MN-major view of every V stage"):
        w.line(
            "Tensor tOrV = make_tensor(GMMA::DescriptorIterator{tl::gmma_desc<GMMA::LayoutType::B128>("
            f"smem_v, {_vt_lbo(e.cfg)}, 64)}},"
        )
        w.line("    Traits::DescLayoutVt{});  // (MMA, MMA_N, MMA_K, kStages)")
    if e.reg is not None:
        note = (
            "folded into Softmax's exp2" if e.reg.fold is not None else "the score region writes log2 units"
        )
        with e.w.tl(e.region_line(), note):
            w.line(f"const float scale_log2 = {e.reg.scale_log2()};")
    else:
        with e.tag("scale", "folded into Softmax's exp2: one FFMA per score"):
            w.line("const float scale_log2 = softmax_scale * 1.44269504088896340736f;  // scale · log2(e)")
    with e.tag("loop" if p.mask == "none" else "mask", "(row, col) of each score, for masking"):
        w.line(
            "Tensor tScS = tl::partition_C(thr_mma_qk, "
            "make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}), Traits::CoordLayoutS{});"
        )
    across = " (across tiles)" if e.cfg.persistent else ""
    with e.tag("loop", "the K/V ring's position, as the producer's" + across):
        w.line("int stage = 0;")
        w.line("uint32_t phase = 0;")
    if e.cfg.pingpong:
        with e.tag(
            "loop",
            "ping-pong: consumer warp groups take turns issuing GEMMs, in a ring (0, 1, …); each turn is a "
            "named barrier (3 + group) that the group before it arrives on",
        ):
            w.line("const int next_wg = consumer_wg + 1 == Traits::kConsumers ? 0 : consumer_wg + 1;")
            w.line("auto my_turn = [&]() { tl::consumer_sync(3 + consumer_wg, 256); };")
            w.line("auto your_turn = [&]() { tl::consumer_arrive(3 + next_wg, 256); };")
    with _tile_loop(e, "consumers"):
        _consumer_tile(e)
    if e.cfg.persistent and not e.cfg.reuse_q_for_o:
        with e.tag("store_o", "the last tile's O store has read shared memory before the block exits"):
            w.line("if (ctid == 0) tma_store_wait<0>();")


def _consumer_tile(e: _Emit) -> None:
    w = e.w
    w.line()
    if e.reg is not None:
        emit_uniforms(w, e.reg, tag_line=e.region_line())
    with e.tag("alloc_acc_o", "fp32 wgmma accumulator fragment"):
        w.line("Tensor acc_o = make_tensor<float>(Traits::AccLayoutO{});  // (MMA, MMA_M, MMA_N)")
        w.line("clear(acc_o);")
    with e.tag("softmax", "running row max and row sum (per thread, for its rows)"):
        w.line("Tensor row_max = make_tensor<float>(Shape<Int<kRowsPerThread>>{});")
        w.line("Tensor row_sum = make_tensor<float>(Shape<Int<kRowsPerThread>>{});")
        w.line("Tensor correction = make_tensor<float>(Shape<Int<kRowsPerThread>>{});")
        w.line("fill(row_max, -__int_as_float(0x7f800000));")
        w.line("clear(row_sum);")
    w.line()
    _lambdas(e)
    w.line()
    with e.tag("load_q", "consumers wait for Q once per tile (also before O reuses its buffer)"):
        w.line(f"FullBarrier::wait(bar_q, {_q_phase(e)});")
    if e.cfg.overlap:
        _loop_overlap(e)
    else:
        _loop_plain(e)
    if e.cfg.persistent and not e.cfg.reuse_q_for_o:
        with e.tag("load_q", "no key block, no Q·Kᵀ: Q's buffer is free at once"):
            w.line("if (n_block_max <= n_block_min) EmptyBarrier::arrive(empty_q);")
    _normalize(e)
    _store_o(e)


def _lambdas(e: _Emit) -> None:
    """The per-block steps as lambdas, so both loop shapes (plain and overlapped) call the same code."""
    w, p = e.w, e.plan
    need = "(n_block + 1) * kBlockN > seqlen_k"
    if p.mask == "causal":
        need += " || (n_block + 1) * kBlockN - 1 > m_block * kBlockM + seqlen_k - seqlen_q"
    elif p.mask == "window":
        need = "true"
    note = {
        "none": "key columns past seqlen_k (last block only)",
        "causal": "bottom-right causal mask and the seqlen_k tail, on blocks that cross them",
        "window": "sliding window (bottom-right aligned) and the seqlen_k tail",
    }[p.mask]
    mask_kind = "loop" if p.mask == "none" else "mask"
    if e.reg is not None:
        emit_score_lambda(w, e.reg, tag_line=e.region_line())
        _softmax_lambdas(e)
        return
    lam = "auto apply_mask = [&](auto& acc_s, int n_block)"
    with e.tag(mask_kind, note), w.block(lam, "};"), w.block(f"if ({need})"):
        w.line(SCORES_ROWCOL)
        w.line("Tensor coords = make_tensor(tScS.data(), tl::acc_rowcol(tScS.layout()));  // (row, col)s")
        w.comment("A row keeps the columns below col_end (and from col_begin on, in a window). A thread's")
        w.comment("columns differ from its first by constants, so with the bounds taken relative to that")
        w.comment("column each score costs one compare against an immediate and a select.")
        w.line("const int thread_col = get<1>(coords(0, 0));  // this thread's first column of the block")
        w.line("const int col_first = n_block * kBlockN + thread_col;  // its key")
        w.line("CUTE_UNROLL")
        with w.block("for (int r = 0; r < size<0>(scores); ++r)"):
            if p.mask == "none":
                w.line("const int col_end = seqlen_k - col_first;")
            else:
                w.line("const int row = m_block * kBlockM + get<0>(coords(r, 0));")
                w.line("const int diagonal = row + seqlen_k - seqlen_q;  // the row's own key (bottom-right)")
            if p.mask == "causal":
                w.line("const int col_end = min(seqlen_k, diagonal + 1) - col_first;")
            elif p.mask == "window":
                w.line(
                    "const int col_end = "
                    "(window_right >= 0 ? min(seqlen_k, diagonal + window_right + 1) : seqlen_k) - col_first;"
                )
                w.line("const int col_begin = (window_left >= 0 ? diagonal - window_left : 0) - col_first;")
            w.line("CUTE_UNROLL")
            with w.block("for (int c = 0; c < size<1>(scores); ++c)"):
                w.line("const int col = get<1>(coords(r, c)) - thread_col;  // a constant")
                out = "col >= col_end" if p.mask != "window" else "col < col_begin || col >= col_end"
                w.line(f"if ({out}) scores(r, c) = -__int_as_float(0x7f800000);")
    _softmax_lambdas(e)


def _softmax_lambdas(e: _Emit) -> None:
    """`softmax_step` and `rescale_o`; without a Softmax both do nothing (the score region wrote P)."""
    w = e.w
    if e.reg is not None and not e.reg.softmax:
        with e.tag("reshape", "no Softmax: the scores are the weights, acc_o is never rescaled"):
            w.line("auto softmax_step = [&](auto& acc_s) {};")
            w.line("auto rescale_o = [&]() {};")
        return
    online = "online: new row max, exp2 of the scores, the factor that rescales acc_o and the sum"
    with e.tag("softmax", online), w.block("auto softmax_step = [&](auto& acc_s)", "};"):
        w.line(SCORES_ROWCOL)
        w.comment("One max and one sum chain per row: in this one-pass form four chains measured 1–4% slower")
        w.comment("on the H200. The pipelined loop at d_v <= 128 takes the split form instead (four max")
        w.comment("chains there, with every row's max before the exps).")
        w.line("CUTE_UNROLL")
        with w.block("for (int r = 0; r < size<0>(scores); ++r)"):
            w.line("float m = row_max(r);")
            w.line("CUTE_UNROLL")
            w.line("for (int c = 0; c < size<1>(scores); ++c) m = fmaxf(m, scores(r, c));")
            w.line("m = tl::quad_max(m);")
            _take_new_max(w, "m", "const float m_scaled")
            w.line("float sum = 0.f;")
            w.line("CUTE_UNROLL")
            with w.block("for (int c = 0; c < size<1>(scores); ++c)"):
                w.line(f"scores(r, c) = {e.exp2('scores(r, c) * scale_log2 - m_scaled')};")
                w.line("sum += scores(r, c);  // this thread's columns; the quad sums at the end")
            w.line("row_sum(r) = row_sum(r) * correction(r) + sum;")
    if e.cfg.split_softmax:
        _split_softmax(e)
    rescale = "rescale acc_o by each row's correction (after the P·V that wrote it has drained)"
    with e.tag("softmax", rescale), w.block("auto rescale_o = [&]()", "};"):
        w.line("Tensor acc_o_rowcol = make_tensor(acc_o.data(), tl::acc_rowcol(acc_o.layout()));")
        w.line("CUTE_UNROLL")
        with w.block("for (int r = 0; r < size<0>(acc_o_rowcol); ++r)"):
            w.line("CUTE_UNROLL")
            w.line("for (int c = 0; c < size<1>(acc_o_rowcol); ++c) acc_o_rowcol(r, c) *= correction(r);")


def _take_new_max(w: CodeWriter, m: str, scaled: str) -> None:
    """Row r's new max `m`: its scaled form (declared by `scaled`), the factor that rescales acc_o and the
    sum, and the running max."""
    name = scaled.split()[-1]
    w.line("// a row that saw only masked keys keeps max = -inf: exp2 against 0 so it stays 0")
    w.line(f"{scaled} = {m} == -__int_as_float(0x7f800000) ? 0.f : {m} * scale_log2;")
    w.line(f"correction(r) = tl::exp2_approx(row_max(r) * scale_log2 - {name});")
    w.line(f"row_max(r) = {m};")


def _split_softmax(e: _Emit) -> None:
    """The pipelined loop's softmax in two halves around the wait for P·V, in the order FA4's SASS has
    them: every row's max (four chains) and its shuffles, then every score's FFMA and the first
    `split_softmax_cols` columns' exps; after the wait, the other exps, each pair converted into P and summed
    as it leaves MUFU. Written as one pass per row, ptxas ran the next row's max chain beside this row's
    exps and converted P in one burst after the wait (the FMNMX and F2FP stalls of the fifth round's
    profile)."""
    w, cols = e.w, e.cfg.split_softmax_cols
    rows = "for (int r = 0; r < size<0>(scores); ++r)"
    with e.tag("softmax", "before P·V's wait: maxes, the FFMAs and the first columns' exps"):
        w.line("Tensor row_max_scaled = make_fragment_like(row_max);  // this block's max · scale_log2")
        with w.block("auto softmax_before_wait = [&](auto& acc_s)", "};"):
            w.line(SCORES_ROWCOL)
            w.line("Tensor m = make_fragment_like(row_max);  // the new maxes, each in four chains")
            w.line("CUTE_UNROLL")
            with w.block(rows):
                w.line("float m0 = scores(r, 0), m1 = scores(r, 1), m2 = scores(r, 2), m3 = scores(r, 3);")
                w.line("CUTE_UNROLL")
                with w.block("for (int c = 4; c < size<1>(scores); c += 4)"):
                    w.line("m0 = fmaxf(m0, scores(r, c)); m1 = fmaxf(m1, scores(r, c + 1));")
                    w.line("m2 = fmaxf(m2, scores(r, c + 2)); m3 = fmaxf(m3, scores(r, c + 3));")
                w.line("m(r) = fmaxf(fmaxf(fmaxf(m0, m1), fmaxf(m2, m3)), row_max(r));  // one FMNMX a score")
            w.line("CUTE_UNROLL")
            w.line(f"{rows} m(r) = tl::quad_max(m(r));")
            w.line("CUTE_UNROLL")
            with w.block(rows):
                _take_new_max(w, "m(r)", "row_max_scaled(r)")
            w.line("CUTE_UNROLL")
            with w.block("for (int c = 0; c < size<1>(scores); ++c)"):
                w.line("CUTE_UNROLL")
                with w.block(rows):
                    w.line("scores(r, c) = scores(r, c) * scale_log2 - row_max_scaled(r);")
                    w.line(f"if (c < {cols}) scores(r, c) = {e.exp2('scores(r, c)')};")
    after = "after P·V's wait: the other exps, each pair converted into P (the Reshape) and summed"
    with e.tag("softmax", after), w.block("auto softmax_after_wait = [&](auto& acc_s, auto& rP)", "};"):
        w.line(SCORES_ROWCOL)
        w.line("float sum[decltype(size<0>(scores))::value];")
        w.line("CUTE_UNROLL")
        w.line(f"{rows} sum[r] = row_sum(r) * correction(r);")
        w.line("CUTE_UNROLL")
        with w.block("for (int c = 0; c < size<1>(scores); c += 2)"):
            w.line("CUTE_UNROLL")
            with w.block(rows):
                with w.block(f"if (c >= {cols})"):
                    w.line(f"scores(r, c) = {e.exp2('scores(r, c)')};")
                    w.line(f"scores(r, c + 1) = {e.exp2('scores(r, c + 1)', 'c + 1')};")
                w.line("cutlass::Array<float, 2> pair;")
                w.line("pair[0] = scores(r, c);")
                w.line("pair[1] = scores(r, c + 1);")
                w.line("const int i = scores.layout()(r, c);  // (r, c) and (r, c + 1) are one word of P")
                w.line("*reinterpret_cast<cutlass::Array<Element, 2>*>(rP.data() + i) =")
                w.line("    cutlass::NumericArrayConverter<Element, float, 2>{}(pair);")
                w.line("sum[r] += pair[0] + pair[1];  // this thread's columns; the quad sums at the end")
        w.line("CUTE_UNROLL")
        w.line(f"{rows} row_sum(r) = sum[r];")


def _qk(e: _Emit, acc: str, *, turn: bool = False) -> None:
    """`turn`: take the ping-pong turn between the wait for K and the issue, so a group never holds the
    tensor cores' turn while its K is still in flight (FlashAttention 3's order)."""
    w = e.w
    with e.tag("gemm_qk", "S = Q·Kᵀ: SS wgmma once K has landed; one commit group"):
        w.line("FullBarrier::wait(&full_k[stage], phase);")
    if turn:
        _turn(e, "my_turn();")
    with e.tag("gemm_qk"):
        w.line(
            f"tl::wgmma</*kZeroInit=*/true, /*kRS=*/false>(tiled_mma_qk, tSrQ, tSrK(_, _, _, stage), {acc});"
        )


def _pv(e: _Emit, stage: str, phase: str) -> None:
    w = e.w
    with e.tag("gemm_pv", "acc_o += P·V: RS wgmma, P from registers, Vᵀ from shared memory"):
        w.line(f"FullBarrier::wait(&full_v[{stage}], {phase});")
        w.line(
            f"tl::wgmma</*kZeroInit=*/false, /*kRS=*/true>(tiled_mma_pv, tOrP, tOrV(_, _, _, {stage}), "
            "acc_o);"
        )


def _reshape(e: _Emit, acc: str) -> None:
    with e.tag("reshape", "P in the input dtype, its registers re-viewed as the wgmma A operand"):
        e.w.line(f"Tensor rP = tl::convert_fragment<Element>({acc});")
        e.w.line("Tensor tOrP = make_tensor(rP.data(), Traits::PLayoutA{});  // (MMA_A, MMA_M, MMA_K)")


def _alloc_s(e: _Emit, name: str) -> None:
    with e.tag("alloc_s", "fp32 scores of one key block (no clear: the first wgmma k-slice writes C = A·B)"):
        e.w.line(f"Tensor {name} = make_tensor<float>(Traits::AccLayoutS{{}});  // (MMA, MMA_M, MMA_N)")


def _loop_plain(e: _Emit) -> None:
    """One key block at a time: Q·Kᵀ, wait, softmax, P·V, wait. Two consumer warp groups still overlap each
    other's softmax with their GEMMs through the warp schedulers."""
    w = e.w
    w.line()
    with e.tag("loop", "one iteration per key block, from the last to the first"):
        w.line("CUTE_NO_UNROLL")
        step = "n_block = next_block(n_block)" if e.by_class else "--n_block"
        w.line(f"for (int n_block = n_block_max - 1; n_block >= n_block_min; {step}) {{")
    with w.indent():
        _alloc_s(e, "acc_s")
        _qk(e, "acc_s")
        _qk_done(e, "acc_s", pending=0, note="S is complete; the K buffer goes back to the producer")
        _apply(e, "acc_s", "cute::true_type{}")
        with e.tag("softmax"):
            w.line("softmax_step(acc_s);")
            w.line("rescale_o();")
        _reshape(e, "acc_s")
        _pv(e, "stage", "phase")
        _pv_done(e, "stage", "O is updated; the V buffer goes back to the producer")
        with e.tag("loop"):
            _advance_ring(e)
    with e.tag("loop"):
        w.line("}")


def _apply(e: _Emit, acc: str, masked: str) -> None:
    """The mask (plain) or the whole score region (variants) on one block's scores."""
    if e.reg is not None:
        with e.w.tl(e.region_line()):
            e.w.line(f"apply_score({acc}, n_block, {masked});")
        return
    with e.tag("mask" if e.plan.mask != "none" else "loop"):
        e.w.line(f"apply_mask({acc}, n_block);")


def _turn(e: _Emit, call: str) -> None:
    if e.cfg.pingpong:
        with e.tag("loop"):
            e.w.line(call)


def _loop_overlap(e: _Emit) -> None:
    """Intra-warp-group pipelining (FlashAttention 3): iteration n issues Q·Kᵀ(n) and P(n+1)·V(n+1) as two
    commit groups, waits for the first only, and runs the softmax of block n while P·V drains."""
    w = e.w
    w.line()
    if e.cfg.pingpong:
        with e.tag("loop", "ping-pong: the last group hands group 0 the first turn"):
            w.line("if (consumer_wg == Traits::kConsumers - 1 && n_block_max > n_block_min) your_turn();")
    with (
        e.tag("loop", "the first key block alone: its P feeds the pipelined loop"),
        w.block("if (n_block_max > n_block_min)"),
    ):
        w.line("int n_block = n_block_max - 1;")
        _alloc_s(e, "acc_s")
        _qk(e, "acc_s", turn=True)
        _turn(e, "your_turn();")
        _qk_done(e, "acc_s", pending=0)
        _apply(e, "acc_s", "cute::true_type{}")
        with e.tag("softmax", "first block: acc_o is still zero, nothing to rescale"):
            w.line("softmax_step(acc_s);")
        _reshape(e, "acc_s")
        with e.tag("loop", "V of this block is consumed one iteration later, with the P just made"):
            w.line("int v_stage = stage;")
            w.line("uint32_t v_phase = phase;")
            _advance_ring(e)
        _overlap_step(e)
        _overlap_loops(e)
        _turn(e, "my_turn();")
        with e.tag("softmax", "the last rescale, before the last P·V"):
            w.line("rescale_o();")
        _pv(e, "v_stage", "v_phase")
        _turn(e, "if (consumer_wg != Traits::kConsumers - 1) your_turn();  // the last gave one turn first")
        _pv_done(e, "v_stage", "the last P·V")


def _overlap_step(e: _Emit) -> None:
    """One pipelined iteration as a lambda, so the masked and the unmasked loop share it (`masked` is a
    compile-time flag: the unmasked loop carries no per-score compare and select)."""
    w = e.w
    with e.tag("loop", "one key block n: Q·Kᵀ(n) overlaps P·V(n + 1)"):
        w.line("auto overlap_step = [&](const int n_block, auto masked) {")
    with w.indent():
        _alloc_s(e, "acc_s_next")
        _qk(e, "acc_s_next", turn=True)
        with e.tag("softmax", "rescale O for the last row max while Q·Kᵀ runs, before P·V adds to it"):
            w.line("rescale_o();")
        _pv(e, "v_stage", "v_phase")
        _turn(e, "your_turn();")
        _qk_done(
            e,
            "acc_s_next",
            pending=1,
            note="wait for Q·Kᵀ only (P·V is the younger commit group and keeps running)",
        )
        if e.reg is not None:
            _apply(e, "acc_s_next", "masked")
        elif e.plan.mask != "none":
            with e.tag("mask"):
                w.line("if constexpr (decltype(masked)::value) apply_mask(acc_s_next, n_block);")
        split = e.cfg.split_softmax
        with e.tag("softmax", "runs on the CUDA cores while the tensor cores finish P·V"):
            w.line("softmax_before_wait(acc_s_next);" if split else "softmax_step(acc_s_next);")
            below = "this half" if split else "the softmax"
            w.line(f"tl::block_boundary(seqlen_k >> 30);  // keeps the wait for P·V below {below}")
        _pv_done(e, "v_stage", "P·V has drained: free V")
        if split:
            with e.tag("softmax", "the rest, writing the next P into the registers P·V has finished reading"):
                w.line("softmax_after_wait(acc_s_next, rP);")
        else:
            with e.tag("reshape", "the next P, into the registers P·V has finished reading"):
                w.line("Tensor rP_next = tl::convert_fragment<Element>(acc_s_next);")
                w.line("CUTE_UNROLL")
                w.line("for (int i = 0; i < size(rP); ++i) rP(i) = rP_next(i);")
        with e.tag("loop"):
            w.line("v_stage = stage;")
            w.line("v_phase = phase;")
            _advance_ring(e)
    with e.tag("loop"):
        w.line("};")


def _overlap_loops(e: _Emit) -> None:
    """Blocks n_block_max − 2 … n_block_min. Only blocks that cross the mask's edge pay for the mask: with no
    mask none does (the seqlen_k tail is in the first block, done above); with a causal mask the blocks
    on the diagonal come first, then the loop without; a window masks every block."""
    w, mask = e.w, e.plan.mask
    if e.by_class and e.plan.ir.block_mask:
        with e.tag("mask_expr", "the kept key blocks; those the masks keep whole run without the mask"):
            w.comment("The classes come from the launch-time buffer: the block below's is read before this")
            w.comment("block's GEMMs, so its memory latency hides under them.")
            w.line("n_block = next_block(n_block_max - 1);")
            w.line("int cls = n_block >= n_block_min ? block_class(n_block) : 0;")
            w.line("CUTE_NO_UNROLL")
            with w.block("while (n_block >= n_block_min)"):
                w.line("const int cls_below = n_block > n_block_min ? block_class(n_block - 1) : 0;")
                w.line("if (cls == 2) overlap_step(n_block, cute::false_type{});")
                w.line("else overlap_step(n_block, cute::true_type{});")
                with w.block("if (cls_below != 0)", "} else {"):
                    w.line("--n_block;")
                    w.line("cls = cls_below;")
                with w.indent():
                    w.line("n_block = next_block(n_block - 1);")
                    w.line("cls = n_block >= n_block_min ? block_class(n_block) : 0;")
                w.line("}")
        return
    if e.by_class:
        with e.tag("mask_expr", "the kept key blocks; those the masks keep whole run without the mask"):
            w.line("n_block = next_block(n_block_max - 1);")
            w.line("CUTE_NO_UNROLL")
            with w.block("for (; n_block >= n_block_min; n_block = next_block(n_block))"):
                w.line("if (block_class(n_block) == 2) overlap_step(n_block, cute::false_type{});")
                w.line("else overlap_step(n_block, cute::true_type{});")
        return
    if mask == "causal":
        with e.tag("mask", "blocks below n_block_unmasked lie left of every row's diagonal: no mask"):
            w.line(
                "const int n_block_unmasked = max(n_block_min, "
                "(m_block * kBlockM + seqlen_k - seqlen_q + 1) / kBlockN);"
            )
    loops = {
        "none": [("n_block_min", "false", "every block left of the first: no mask")],
        "causal": [
            ("n_block_unmasked", "true", "blocks on the diagonal: masked"),
            ("n_block_min", "false", "the rest: no mask"),
        ],
        "window": [("n_block_min", "true", "every block: the window can cut any of them")],
    }[mask]
    w.line("n_block = n_block_max - 2;")
    for low, masked, note in loops:
        with e.tag("mask" if masked == "true" else "loop", note):
            w.line("CUTE_NO_UNROLL")
            w.line(f"for (; n_block >= {low}; --n_block) overlap_step(n_block, cute::{masked}_type{{}});")


def _qk_done(e: _Emit, acc: str, *, pending: int, note: str = "") -> None:
    """Wait until at most `pending` wgmma groups are in flight (Q·Kᵀ is done), then hand K back."""
    w = e.w
    with e.tag("gemm_qk", note):
        w.line(f"warpgroup_wait<{pending}>();")
        w.line(f"warpgroup_fence_operand({acc});")
        w.line("if (cute::elect_one_sync()) EmptyBarrier::arrive(&empty_k[stage]);  // for the whole warp")
        _release_q(e)


def _pv_done(e: _Emit, stage: str, note: str) -> None:
    """Wait for every wgmma group (P·V is done): acc_o is final for this block, V goes back."""
    w = e.w
    with e.tag("gemm_pv", note):
        w.line("warpgroup_wait<0>();")
        w.line("warpgroup_fence_operand(acc_o);")
        w.line(f"if (cute::elect_one_sync()) EmptyBarrier::arrive(&empty_v[{stage}]);")


def _release_q(e: _Emit) -> None:
    """Persistent with O in its own buffer: after the tile's last Q·Kᵀ, Q's buffer is the next tile's."""
    if e.cfg.persistent and not e.cfg.reuse_q_for_o:
        with e.tag("load_q", "this tile's last Q·Kᵀ has read Q: the producer may load the next tile's"):
            e.w.line("if (n_block == n_block_min) EmptyBarrier::arrive(empty_q);")


def _normalize(e: _Emit) -> None:
    w = e.w
    w.line()
    with e.tag("normalize", "and the row log-sum-exp; a row that saw no key gets O = 0, LSE = +inf"):
        if e.reg is not None:
            emit_normalize(w, e.reg, "thr_mma_pv", "Traits::CoordLayoutO")
        else:
            emit_normalize_rows(w)


def _store_o(e: _Emit) -> None:
    w, c = e.w, e.cfg
    w.line()
    last = (
        "the sequence's rows to global memory"
        if e.varlen
        else "TMA store (rows past seqlen_q are clipped by TMA)"
    )
    with e.tag("store_o", f"LSE from registers; O registers → shared (stmatrix) → {last}"):
        if e.reg is None or e.reg.softmax:
            emit_store_lse(w, "thr_mma_pv", packed=e.varlen, coord_layout="Traits::CoordLayoutO")
        w.line()
        w.line("Tensor rO = tl::convert_fragment<Element>(acc_o);")
        if c.reuse_q_for_o:
            w.line("tl::consumer_sync(1, kConsumerThreads);  // every warp group's last Q·Kᵀ has read sQ")
        elif c.persistent:
            w.line("if (ctid == 0) tma_store_wait<0>();  // the last tile's O store has read sO")
            w.line("tl::consumer_sync(1, kConsumerThreads);")
        w.line(
            "Tensor sO = make_tensor(make_smem_ptr(smem_o), Traits::SmemLayoutO{});  // (kBlockM, kHeadDimV)"
        )
        if c.rows_per_consumer == WGMMA_M:
            _stsm_o(e)
        else:
            w.line(
                "auto smem_tiled_copy_O = make_tiled_copy_C("
                "Copy_Atom<SM90_U32x4_STSM_N, Element>{}, tiled_mma_pv);  // stmatrix"
            )
            w.line("auto smem_thr_copy_O = smem_tiled_copy_O.get_thread_slice(ctid);")
            w.line(
                "cute::copy(smem_tiled_copy_O, smem_thr_copy_O.retile_S(rO), "
                "smem_thr_copy_O.partition_D(sO));"
            )
        if e.varlen:
            _store_o_rows(e)
            return
        w.line("cutlass::arch::fence_view_async_shared();  // stmatrix writes → visible to the TMA engine")
        w.line("tl::consumer_sync(2, kConsumerThreads);")
        with w.block("if (ctid == 0)"):
            w.line("CUTE_UNROLL")
            with w.block(f"for (int c = 0; c < {c.boxes_v}; ++c)"):
                w.line(
                    "SM90_TMA_STORE_4D::copy(&tma_o, smem_o + c * kBlockM * kBoxCols, c * kBoxCols, "
                    "m_block * kBlockM, bidh, bidb);"
                )
            w.line("tma_store_arrive();")
            if not c.persistent:
                w.line("tma_store_wait<0>();  // the store has read shared memory before the block exits")
            elif c.reuse_q_for_o:
                w.line("tma_store_wait<0>();  // the store has read O out of Q's buffer:")
                w.line("EmptyBarrier::arrive(empty_q);  // the next tile's Q may land there")


def _stsm_o(e: _Emit) -> None:
    """O's stmatrix without CuTe's make_tiled_copy_C / partition_D / retile_S: the partitions those give
    (one 64-row wgmma tile a warp group), written out (tests/translator/test_sm90_desc.py)."""
    w = e.w
    w.comment("stmatrix (8 × 8, ×4) a step, as CuTe's make_tiled_copy_C / partition_D / retile_S lay it out")
    w.comment("for this thread: lane l of warp w gives row 16·w + l % 16 (64 a warp group) of 16 columns")
    w.comment("8·(l / 16) on, a step 16 columns on (32 bytes), then the next 64-column block; its registers")
    w.comment("are the accumulator's 16-bit values in order, 8 a step. The swizzle is sO's pointer's. The")
    w.comment("offset's terms in the order of CuTe's thread layout (16, 2, 8):(64, 8, 1024): the same SASS.")
    w.line("const int o_offset = ctid % 16 * 64 + ctid / 16 % 2 * 8 + ctid / 32 * 1024;  // unswizzled")
    boxes, steps = e.cfg.boxes_v, e.plan.head_dim_v // 16
    w.line(
        f"Tensor tOsO = make_tensor(sO.data() + o_offset, Traits::StsmLayoutO{{}});"
        f"  // ((8, {'4' if boxes == 1 else f'(4, {boxes})'}), 1, 1)"
    )
    w.line(f"Tensor tOrO = make_tensor(rO.data(), Traits::StsmLayoutR{{}});  // ((8, {steps}), 1, 1)")
    w.comment("The copy as cute::copy's loops end up issuing it (one Copy_Atom::call a step, the same")
    w.comment("instructions), without its group_modes / zipped_divide over these layouts (~1 s of nvcc).")
    w.line("Copy_Atom<SM90_U32x4_STSM_N, Element> stsm_atom;")
    w.line("CUTE_UNROLL")
    with w.block("for (int i = 0; i < size<0, 1>(tOrO); ++i)"):
        w.line("stsm_atom.call(tOrO(make_coord(_, i), 0, 0), tOsO(make_coord(_, i), 0, 0));")


def _store_o_rows(e: _Emit) -> None:
    """A packed batch's O: the rows past seqlen_q belong to the next sequence, and a TMA store writes the
    whole box, so the consumers copy the tile's own rows out of shared memory in 16-byte pieces."""
    w = e.w
    w.line("tl::consumer_sync(2, kConsumerThreads);  // every warp's stmatrix has landed")
    w.line("const int rows_left = seqlen_q - m_block * kBlockM;  // this tile's rows of the sequence")
    w.line(
        "Element* o_tile = static_cast<Element*>(o) + static_cast<long long>(q_start + m_block * kBlockM) * "
        "o_row_stride + bidh * o_head_stride;"
    )
    w.line("constexpr int kChunks = kHeadDimV / 8;  // 16-byte pieces of a row")
    w.line("CUTE_UNROLL")
    with w.block("for (int i = ctid; i < kBlockM * kChunks; i += kConsumerThreads)"):
        w.line("const int row = i / kChunks, col = i % kChunks * 8;  // contiguous under the swizzle")
        with w.block("if (row < rows_left)"):
            w.line(
                "*reinterpret_cast<uint4*>(o_tile + row * o_row_stride + col) = "
                "*reinterpret_cast<uint4 const*>(&sO(row, col));"
            )
