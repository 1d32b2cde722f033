"""One emitter per TL step kind (the table `EMITTERS`), and the schedule that places them.

A step may emit in several phases: `setup` (tensors and partitions, before the loop), `issue` (the copy
itself), `loop` (inside the key loop), `epilogue`. The schedule (`SCHEDULE`) is FlashAttention 2's
pipeline: V's load is issued before Q·Kᵀ and the next K's after it, so each tile's global → shared copy
overlaps a GEMM. Every emitted block is tagged with the TL line of the step it implements.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from translator.backends import regions
from translator.backends.arch import ArchFacts, SmemGeometry
from translator.backends.regions import Regions
from translator.backends.row_helpers import emit_normalize_rows, emit_store_lse
from translator.plan import KernelPlan
from translator.writer import CodeWriter


@dataclass
class Emit:
    w: CodeWriter
    plan: KernelPlan
    facts: ArchFacts
    masked: bool = True  # while writing the loop body: the copy for blocks that need the mask
    reg: Regions | None = None  # the variant's regions; None for the plain forward (its tuned code)

    def __post_init__(self) -> None:
        if not self.plan.ir.plain:
            self.reg = Regions(self.plan.ir)

    @functools.cached_property
    def fragments_written(self) -> bool:
        """The traits carry the register fragments' layouts (`fragment_layouts`)."""
        return fragment_layouts(self.plan, self.facts) is not None

    @property
    def coord_layout_o(self) -> str | None:
        """The traits type of O's identity partition (`row_helpers.identity_partition_o`), if written."""
        return "Traits::CoordLayoutO" if self.fragments_written else None

    @functools.cached_property
    def copies_written(self) -> bool:
        """The traits carry the global ↔ shared copies' thread layouts (`copy_layouts`)."""
        return copy_layouts(self.plan, self.facts) is not None

    def partition(self, thr_copy: str, how: str, tensor: str, x: str, coord: bool = False) -> str:
        """A copy's partition of `tensor` (`how`: partition_S or _D of `thr_copy`), on the thread layout
        the traits write out where they do; `coord`: the identity tensor's, CopyCoordLayout{x}."""
        if self.copies_written:
            return f"tl::thr_partition({tensor}, Traits::Copy{'Coord' if coord else ''}Layout{x}{{}}, tidx)"
        return f"{thr_copy}.{how}({tensor})"

    @property
    def by_class(self) -> bool:
        """Mask expressions beyond the `Mask` header: key blocks are classified one by one."""
        return self.reg is not None and self.plan.ir.header_mask == "expr"

    @property
    def next_block(self) -> str:
        return "n_next" if self.by_class else "n_block - 1"

    @property
    def has_next(self) -> str:
        return "n_next >= n_block_min" if self.by_class else "n_block > n_block_min"

    def line_of(self, kind: str) -> int | None:
        return self.plan.line_of(kind)

    def tag(self, kind: str, note: str = ""):  # -> context manager
        s = self.plan.step(kind)
        if s is None:
            line = self.plan.header_lines.get(kind)
            return self.w.tl(line, note if line is not None else "")
        return self.w.tl(s.tl_line, f"{s.text}{'  — ' + note if note else ''}")

    def run(self, kind: str, phase: str) -> None:
        EMITTERS[kind](self, phase)

    def run_body(self) -> None:
        for kind, phase in SCHEDULE:
            self.run(kind, phase)

    # --- pipeline primitives: no-ops on sm_75, whose copies are synchronous ---------------------------
    def fence(self) -> None:
        if self.facts.cp_async:
            self.w.line("cute::cp_async_fence();")

    def wait(self, n: int | str = 0) -> None:
        if self.facts.cp_async:
            self.w.line(f"cute::cp_async_wait<{n}>();")


# CuTe's named constants (cute/numeric/integral_constant.hpp); any other is spelled Int<n>.
_NAMED = {*range(11), 12, *range(16, 257, 8), 384, 512, 768, *(1 << k for k in range(10, 20))}


def _c(n: int) -> str:
    return f"_{n}" if n in _NAMED else f"Int<{n}>"


def fragment_layouts(plan: KernelPlan, facts: ArchFacts) -> dict[str, str] | None:
    """The register fragments' layouts that `partition_fragment_A / _B / _C` and the ldmatrix copies'
    `retile_D` derive for m16n8k16 atoms tiled kNWarps × 1 × 1 (tests/translator/test_sm80_fragments.py
    checks them against CuTe), written out so the kernel does not instantiate that algebra; None where
    the kernel keeps CuTe's derivation (m16n8k8 atoms, a 16-key tile)."""
    if facts.mma_k != 16 or plan.block_n < 32:
        return None

    def mode(inner: int, outer: int, s_in: int, s_out: int) -> tuple[str, str]:
        if outer == 1:
            return _c(inner), _c(s_in)
        return f"Shape<{_c(inner)}, {_c(outer)}>", f"Stride<{_c(s_in)}, {_c(s_out)}>"

    m = plan.block_m // (16 * plan.warps)
    wq, wv = SmemGeometry(plan.head_dim_qk).block_k, SmemGeometry(plan.head_dim_v).block_k
    kq_in, kq_out = wq // 16, plan.head_dim_qk // wq
    nv_in, nv_out = wv // 8, plan.head_dim_v // wv
    n, kv = plan.block_n // 8, plan.block_n // 16
    ms = 8 * kq_in if m > 1 else 0
    # Q (A operand): ((2, 2, 2) values, MMA_M, (k16 slices of an atom row, atoms)); ldmatrix.x4 moves the 8.
    kq = mode(kq_in, kq_out, 8, 8 * kq_in * m)
    kq_view = kq if m > 1 or kq_out == 1 else (_c(kq_in * kq_out), "_8")
    # K (B operand): ((2, 2), MMA_N, MMA_K); ldmatrix.x4 moves two n8 tiles.
    ns = 4 * kq_in
    kk = mode(kq_in, kq_out, 4, 4 * kq_in * n)
    # Vᵀ (B operand): ((2, 2), (n8 tiles of an atom, atoms), MMA_K_V); ldmatrix.trans.x4 moves two.
    vs = 4 * nv_in
    nv = mode(nv_in, nv_out, 4, 4 * nv_in * kv)
    nv_view = mode(nv_in // 2, nv_out, 8, 4 * nv_in * kv)
    acc_m = _c(4 if m > 1 else 0)

    def lay(shape: str, stride: str) -> str:
        return f"Layout<Shape<{shape}>, Stride<{stride}>>"

    def swizzled(bits: int, shape: str, stride: str) -> str:
        return f"ComposedLayout<Swizzle<{bits}, 3, 3>, _0, {lay(shape, stride)}>"

    # The ldmatrix sources: TiledCopy::tidfrg_S of the swizzled shared tiles, (thread, 8 values, rest).
    # A thread's 16-byte row: lanes 0-15 walk 16 rows (8 for K's x4, which lane 16 moves 8 rows on), lane 16
    # (K: lane 8) the next 8 columns; the warps own 16 · w rows of Q, and all of K and V.
    bq, bv = SmemGeometry(plan.head_dim_qk).swizzle_bits, SmemGeometry(plan.head_dim_v).swizzle_bits
    w = plan.warps
    # The threads' last mode, the warps (their stride: 16 rows of Q, none for K and V), is not there
    # with one warp.
    warps = f", {_c(w)}" if w > 1 else ""

    def warp_stride(n: int) -> str:
        return f", {_c(n) if n else '_0'}" if w > 1 else ""
    lq = mode(kq_in, kq_out, 16, plan.block_m * wq)
    lk = mode(kq_in, kq_out, 16, plan.block_n * wq)
    lv = mode(wv // 16, nv_out, 16, plan.block_n * wv)
    k_stage = _c(plan.block_n * plan.head_dim_qk) if plan.stages > 1 else "_0"
    v_stage = _c(plan.block_n * plan.head_dim_v) if plan.stages > 1 else "_0"

    def coord(cols: int) -> str:
        # thrfrg_C of a (BM, cols) identity tensor: ((ThrV (4, 8), (ThrM warps, ThrN 1)), (FrgV (2 cols,
        # 2 rows), (MMA_M, cols / 8))), with ScaledBasis<s, 0> stepping rows, <s, 1> columns.
        def sb(n: int, mode: int) -> str:
            return f"ScaledBasis<{_c(n)}, {mode}>"

        return lay(
            f"Shape<Shape<_4, _8>, Shape<{_c(w)}, _1>>, "
            f"Shape<Shape<_2, _2>, Shape<{_c(m)}, {_c(cols // 8)}>>",
            f"Stride<Stride<{sb(2, 1)}, {sb(1, 0)}>, Stride<{sb(16, 0) if w > 1 else '_0'}, _0>>, "
            f"Stride<Stride<{sb(1, 1)}, {sb(8, 0)}>, Stride<{sb(16 * w, 0) if m > 1 else '_0'}, {sb(8, 1)}>>",
        )

    # O's registers → shared store, 32 bits (a column pair) a copy: make_tiled_copy_C's tidfrg_D of sO
    # (lane: column pair, row; warp: 16 rows; values: the pair, 8 rows on, 8 columns on) and its retile_S
    # of the accumulator (pairs, MMA_M, 16-column groups).
    lo = mode(wv // 16, nv_out, 16, plan.block_m * wv)
    store_o = swizzled(
        bv,
        f"Shape<_4, _8{warps}>, Shape<_2, Shape<_2, _2>>, Shape<{_c(m)}, {lo[0]}>",
        f"Stride<_2, {_c(wv)}{warp_stride(16 * wv)}>, Stride<_1, Stride<{_c(8 * wv)}, _8>>, "
        f"Stride<{_c(16 * w * wv) if m > 1 else '_0'}, {lo[1]}>",
    )
    dv16 = _c(plan.head_dim_v // 16)
    store_o_regs = (
        lay(
            f"Shape<_2, Shape<_2, _2>>, {_c(m)}, {dv16}",
            f"Stride<_1, Stride<_2, {_c(4 * m)}>>, _4, {_c(8 * m)}",
        )
        if m > 1
        else lay(f"Shape<_2, _4>, _1, {dv16}", "Stride<_1, _2>, _0, _8")
    )

    return {
        "FragLayoutQ": lay(f"Shape<_2, _2, _2>, {_c(m)}, {kq[0]}", f"Stride<_1, _2, _4>, {_c(ms)}, {kq[1]}"),
        "FragLayoutQView": lay(
            f"Shape<_8, _1>, {_c(m)}, {kq_view[0]}", f"Stride<_1, _0>, {_c(ms)}, {kq_view[1]}"
        ),
        "FragLayoutK": lay(f"Shape<_2, _2>, {_c(n)}, {kk[0]}", f"Stride<_1, _2>, {_c(ns)}, {kk[1]}"),
        "FragLayoutKView": lay(
            f"Shape<Shape<_4, _2>, _1>, {_c(n // 2)}, {kk[0]}",
            f"Stride<Stride<_1, {_c(ns)}>, _0>, {_c(2 * ns)}, {kk[1]}",
        ),
        "FragLayoutVt": lay(f"Shape<_2, _2>, {nv[0]}, {_c(kv)}", f"Stride<_1, _2>, {nv[1]}, {_c(vs)}"),
        "FragLayoutVtView": lay(
            f"Shape<_8, _1>, {nv_view[0]}, {_c(kv)}", f"Stride<_1, _0>, {nv_view[1]}, {_c(vs)}"
        ),
        "AccLayoutO": lay(
            f"Shape<_2, _2>, {_c(m)}, {_c(plan.head_dim_v // 8)}", f"Stride<_1, _2>, {acc_m}, {_c(4 * m)}"
        ),
        "AccLayoutS": lay(f"Shape<_2, _2>, {_c(m)}, {_c(n)}", f"Stride<_1, _2>, {acc_m}, {_c(4 * m)}"),
        "CoordLayoutS": coord(plan.block_n),
        "CoordLayoutO": coord(plan.head_dim_v),
        "StoreLayoutO": store_o,
        "StoreLayoutOR": store_o_regs,
        "LdsmLayoutQ": swizzled(
            bq,
            f"Shape<_16, _2{warps}>, Shape<_8, _1>, Shape<{_c(m)}, {lq[0]}>",
            f"Stride<{_c(wq)}, _8{warp_stride(16 * wq)}>, Stride<_1, _0>, "
            f"Stride<{_c(16 * w * wq) if m > 1 else '_0'}, {lq[1]}>",
        ),
        "LdsmLayoutK": swizzled(
            bq,
            f"Shape<_8, _2, _2{warps}>, Shape<_8, _1>, "
            f"Shape<{_c(kv)}, {lk[0]}, Shape<_1, {_c(plan.stages)}>>",
            f"Stride<{_c(wq)}, _8, {_c(8 * wq)}{warp_stride(0)}>, Stride<_1, _0>, "
            f"Stride<{_c(16 * wq)}, {lk[1]}, Stride<_0, {k_stage}>>",
        ),
        "LdsmLayoutVt": swizzled(
            bv,
            f"Shape<_16, _2{warps}>, Shape<_8, _1>, Shape<{lv[0]}, {_c(kv)}, {_c(plan.stages)}>",
            f"Stride<{_c(wv)}, _8{warp_stride(0)}>, Stride<_1, _0>, "
            f"Stride<{lv[1]}, {_c(16 * wv)}, {v_stage}>",
        ),
    }


def copy_layouts(plan: KernelPlan, facts: ArchFacts) -> dict[str, str] | None:
    """The 16-byte global ↔ shared copies' thread layouts, as `TiledCopy::tidfrg_D / _S` derive them for
    the shared tiles (cp.async destinations, O's source), and for the identity tensors that give each
    copied vector's (row, col) (tests/translator/test_sm80_fragments.py checks them); None where the
    kernel keeps CuTe's partitions (where `fragment_layouts` does, and where the threads' rows do not
    tile a buffer's rows)."""
    if fragment_layouts(plan, facts) is None:
        return None
    threads = 32 * plan.warps
    tiles = {
        "Q": (plan.block_m, plan.head_dim_qk, 1),
        "K": (plan.block_n, plan.head_dim_qk, plan.stages),
        "V": (plan.block_n, plan.head_dim_v, plan.stages),
        "O": (plan.block_m, plan.head_dim_v, 1),
    }
    out: dict[str, str] = {}
    for x, (rows, cols, stages) in tiles.items():
        g = SmemGeometry(cols)
        tpr, wk = g.threads_per_row, g.block_k
        rp = threads // tpr  # rows one pass of the threads covers
        if threads % tpr or rows % rp:
            return None
        mr, mc = rows // rp, cols // wk
        # (thread, 8 values, (passes over the rows, atom columns[, (1, stage)])): a thread's 8 columns,
        # tpr threads a row; 0 strides where a mode has one element.
        shape = f"Shape<{_c(tpr)}, {_c(rp)}>, Shape<_8, _1>, Shape<{_c(mr)}, {_c(mc)}"
        stride = (
            f"Stride<_8, {_c(wk)}>, Stride<_1, _0>, "
            f"Stride<{_c(rp * wk) if mr > 1 else '_0'}, {_c(rows * wk) if mc > 1 else '_0'}"
        )
        staged = x in "KV"
        layout = f"Layout<Shape<{shape}"
        layout += f", Shape<_1, {_c(stages)}>>>" if staged else ">>"
        layout += f", Stride<{stride}"
        layout += f", Stride<_0, {_c(rows * cols) if stages > 1 else '_0'}>>>>" if staged else ">>>"
        out[f"CopyLayout{x}"] = f"ComposedLayout<Swizzle<{g.swizzle_bits}, 3, 3>, _0, {layout}>"
        coord = (
            f"Layout<Shape<{shape}>>, Stride<Stride<ScaledBasis<_8, 1>, ScaledBasis<_1, 0>>, "
            f"Stride<ScaledBasis<_1, 1>, _0>, "
            f"Stride<{f'ScaledBasis<{_c(rp)}, 0>' if mr > 1 else '_0'}, "
            f"{f'ScaledBasis<{_c(wk)}, 1>' if mc > 1 else '_0'}>>>"
        )
        out[f"CopyCoordLayout{x}"] = coord
    return out


def _globals(e: Emit, phase: str) -> None:
    """Allocate Q/K/V/O in global: the (seqlen, dim) slice of this (batch, head), int64 strides."""
    w, p = e.w, e.plan
    specs = (
        ("alloc_q", "mQ", "q", "Element const", "seqlen_q", "kHeadDimQK", "bidh"),
        ("alloc_k", "mK", "k", "Element const", "seqlen_k", "kHeadDimQK", "bidh_kv"),
        ("alloc_v", "mV", "v", "Element const", "seqlen_k", "kHeadDimV", "bidh_kv"),
        ("alloc_o", "mO", "o", "Element", "seqlen_q", "kHeadDimV", "bidh"),
    )
    w.line()
    with w.tl(
        e.line_of("group") or e.line_of("heads_kv") or e.line_of("alloc_k"),
        "GQA/MQA: consecutive query heads share one K/V head" if (p.group or p.heads_kv) else "",
    ):
        w.line("const int bidh_kv = bidh / (heads / heads_kv);  // K/V head of this query head")
    if e.reg is not None:
        regions.emit_uniforms(w, e.reg, tag_line=e.line_of("score_mod") or e.line_of("mask_expr"))
    for kind, m, ptr, ty, rows, dim, head in specs:
        with e.tag(kind):
            w.line(
                f"Tensor {m} = make_tensor(make_gmem_ptr(static_cast<{ty}*>({ptr}) + bidb * "
                f"{ptr}_batch_stride "
                f"+ {head} * {ptr}_head_stride),"
            )
            w.line(
                f"                        make_shape({rows}, Int<{dim}>{{}}), "
                f"make_stride({ptr}_row_stride, _1{{}}));  // ({rows}, {dim})"
            )


def _key_range(e: Emit, phase: str) -> None:
    """Which key blocks this query block reads: all, or those the causal/window mask lets through."""
    w, p = e.w, e.plan
    w.line()
    with e.tag("loop", "key blocks [n_block_min, n_block_max), walked from the last (FA2)"):
        w.line("int n_block_min = 0;")
        w.line("int n_block_max = cute::ceil_div(seqlen_k, kBlockN);")
    if e.by_class:
        regions.emit_block_class(w, e.reg, tag_line=e.line_of("mask_expr"))  # type: ignore[arg-type]
        return
    if p.mask == "none":
        return
    with e.tag("mask", f"Mask {p.mask}: skip key blocks no row of this block can see (bottom-right aligned)"):
        right = "" if p.mask == "causal" else " + window_right"
        if p.mask == "window":
            w.line("if (window_right >= 0) {")
            w.line(
                "  n_block_max = min(n_block_max, cute::ceil_div((m_block + 1) * kBlockM + "
                "seqlen_k - seqlen_q"
                f"{right}, kBlockN));"
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


def _load_q(e: Emit, phase: str) -> None:
    w = e.w
    w.line()
    with e.tag("load_q", "tiled 16-byte copies into swizzled smem; rows past seqlen_q are zeroed"):
        w.line(
            "Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDimQK>>{}, make_coord(m_block, 0));"
            "  // (kBlockM, kHeadDimQK)"
        )
        w.line(
            "Tensor sQ = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(smem)), "
            "Traits::SmemLayoutQ{});"
            "  // (kBlockM, kHeadDimQK)"
        )
        w.line("typename Traits::GmemTiledCopyQK gmem_tiled_copy_QK;")
        w.line("auto gmem_thr_copy_QK = gmem_tiled_copy_QK.get_thread_slice(tidx);")
        w.line("Tensor tQgQ = gmem_thr_copy_QK.partition_S(gQ);  // (QCPY, QCPY_M, QCPY_K)")
        tq = e.partition("gmem_thr_copy_QK", "partition_D", "sQ", "Q")
        w.line(f"Tensor tQsQ = {tq};  // (QCPY, QCPY_M, QCPY_K)")
        cq = e.partition(
            "gmem_thr_copy_QK",
            "partition_S",
            "make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDimQK>>{})",
            "Q",
            True,
        )
        w.line(f"Tensor tQcQ = {cq};  // (row, col) of each copied vector")
        w.line("const int q_rows = seqlen_q - m_block * kBlockM;  // valid rows in this tile")
        w.line("CUTE_UNROLL")
        with w.block("for (int m = 0; m < size<1>(tQsQ); ++m)"):
            with w.block("if (get<0>(tQcQ(0, m, 0)) < q_rows)"):
                w.line("cute::copy(gmem_tiled_copy_QK, tQgQ(_, m, _), tQsQ(_, m, _));")
            with w.block("else", "}"):
                w.line("cute::clear(tQsQ(_, m, _));")


def _load_tile(e: Emit, name: str, copy: str, staged: bool) -> None:
    """The copy of one key block of K or V, as a lambda the loop calls per block. `predicated` (a
    compile-time flag) guards rows past seqlen_k; only the last key block can be partial."""
    w = e.w
    stage_arg, stage_idx = (", int stage", ", stage") if staged else ("", "")
    g, s = f"t{name}g{name}", f"t{name}s{name}"
    with w.block(f"auto load_{name} = [&](int n_block{stage_arg}, auto predicated)", "};"):
        with w.block("if constexpr (decltype(predicated)::value)"):
            w.line("const int rows = seqlen_k - n_block * kBlockN;  // rows left in this block")
            w.line("CUTE_UNROLL")
            with w.block(f"for (int n = 0; n < size<1>({s}); ++n)"):
                with w.block(f"if (get<0>(t{name}c{name}(0, n, 0)) < rows)"):
                    w.line(f"cute::copy({copy}, {g}(_, n, _, n_block), {s}(_, n, _{stage_idx}));")
                with w.block("else", "}"):
                    w.line(f"cute::clear({s}(_, n, _{stage_idx}));  // zero rows past seqlen_k: 0·P stays 0")
        with w.block("else", "}"):
            w.line(f"cute::copy({copy}, {g}(_, _, _, n_block), {s}(_, _, _{stage_idx}));")


def _load_k(e: Emit, phase: str) -> None:
    w, p = e.w, e.plan
    if phase == "setup":
        w.line()
        with e.tag("load_k", f"{p.stages} K buffer{'s' if p.stages > 1 else ''} after Q's"):
            w.line(
                "Tensor gK = local_tile(mK, Shape<Int<kBlockN>, Int<kHeadDimQK>>{}, make_coord(_, 0));"
                "  // (kBlockN, kHeadDimQK, n_blocks)"
            )
            w.line(
                "Tensor sK = make_tensor(sQ.data() + size(sQ), Traits::SmemLayoutK{});"
                "  // (kBlockN, kHeadDimQK, kStages)"
            )
            w.line("Tensor tKgK = gmem_thr_copy_QK.partition_S(gK);  // (KCPY, KCPY_N, KCPY_K, n_blocks)")
            tk = e.partition("gmem_thr_copy_QK", "partition_D", "sK", "K")
            w.line(f"Tensor tKsK = {tk};  // (KCPY, KCPY_N, KCPY_K, kStages)")
            ck = e.partition(
                "gmem_thr_copy_QK",
                "partition_S",
                "make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDimQK>>{})",
                "K",
                True,
            )
            w.line(f"Tensor tKcK = {ck};")
            _load_tile(e, "K", "gmem_tiled_copy_QK", staged=True)
    elif phase == "prologue":
        w.line()
        with e.tag("load_k", "the first (highest) key block, in flight with Q; it may be partial"):
            with w.block("if (n_block_max > n_block_min)"):
                w.line("load_K(n_block_max - 1, 0, cute::true_type{});")
            e.fence()
    elif phase == f"prefetch{p.stages}":
        note = (
            "prefetch the next key block into the other buffer; it overlaps this block's whole compute"
            if p.stages == 2
            else "prefetch the next key block; it overlaps softmax and P·V"
        )
        with (
            e.tag("load_k", note + " (a full block: only the highest can be partial)"),
            w.block(f"if ({e.has_next})"),
        ):
            w.line(f"load_K({e.next_block}, {'stage ^ 1' if p.stages == 2 else '0'}, cute::false_type{{}});")
            e.fence()


def _load_v(e: Emit, phase: str) -> None:
    w = e.w
    if phase == "setup":
        w.line()
        with e.tag("load_v", "V buffers after the K buffers"):
            w.line(
                "Tensor gV = local_tile(mV, Shape<Int<kBlockN>, Int<kHeadDimV>>{}, make_coord(_, 0));"
                "  // (kBlockN, kHeadDimV, n_blocks)"
            )
            w.line(
                "Tensor sV = make_tensor(sK.data() + size(sK), Traits::SmemLayoutV{});"
                "  // (kBlockN, kHeadDimV, kStages)"
            )
            w.line("typename Traits::GmemTiledCopyV gmem_tiled_copy_V;")
            w.line("auto gmem_thr_copy_V = gmem_tiled_copy_V.get_thread_slice(tidx);")
            w.line("Tensor tVgV = gmem_thr_copy_V.partition_S(gV);  // (VCPY, VCPY_N, VCPY_K, n_blocks)")
            tv = e.partition("gmem_thr_copy_V", "partition_D", "sV", "V")
            w.line(f"Tensor tVsV = {tv};  // (VCPY, VCPY_N, VCPY_K, kStages)")
            cv = e.partition(
                "gmem_thr_copy_V",
                "partition_S",
                "make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDimV>>{})",
                "V",
                True,
            )
            w.line(f"Tensor tVcV = {cv};")
            _load_tile(e, "V", "gmem_tiled_copy_V", staged=True)
    elif phase == "prologue":
        if e.plan.stages == 1:
            return  # FA2's scheme: V is issued inside the loop, before Q·Kᵀ
        with e.tag("load_v", "the first (highest) key block, behind its K"):
            with w.block("if (n_block_max > n_block_min)"):
                w.line("load_V(n_block_max - 1, 0, cute::true_type{});")
            e.fence()
    elif phase == "prefetch2":
        with (
            e.tag("load_v", "prefetch the next key block's V into the other buffer, behind its K"),
            w.block(f"if ({e.has_next})"),
        ):
            w.line(f"load_V({e.next_block}, stage ^ 1, cute::false_type{{}});")
            e.fence()
    else:
        with e.tag("load_v", "issued before Q·Kᵀ so the copy overlaps it (FA2's pipeline)"):
            if e.masked:
                w.line("load_V(n_block, 0, cute::true_type{});  // may be the partial last block")
            else:
                w.line("load_V(n_block, 0, cute::false_type{});")
            e.fence()


def _operand_to_reg(e: Emit, x: str, mn: str, derived: str, copy: str, smem_dims: str) -> None:
    """Q's or K's register fragment (written out where `fragment_layouts` has it, else CuTe's `derived`
    partition) and its ldmatrix copy from shared memory, with the fragment's view for the copy."""
    w = e.w
    frag, view = f"tSr{x}", f"tSr{x}_view"
    if e.fragments_written:
        w.line(f"Tensor {frag} = make_tensor<Element>(Traits::FragLayout{x}{{}});  // (MMA, MMA_{mn}, MMA_K)")
        w.line(f"Tensor tSs{x} = tl::thr_partition(s{x}, Traits::LdsmLayout{x}{{}}, tidx);  // {smem_dims}")
    else:
        w.line(f"Tensor {frag} = {derived};  // (MMA, MMA_{mn}, MMA_K)")
        w.line(f"auto smem_tiled_copy_{x} = {copy}(typename Traits::SmemCopyAtom{{}}, tiled_mma);")
        w.line(f"auto smem_thr_copy_{x} = smem_tiled_copy_{x}.get_thread_slice(tidx);")
        w.line(f"Tensor tSs{x} = smem_thr_copy_{x}.partition_S(s{x});  // {smem_dims}")
    if e.fragments_written:
        w.line(
            f"Tensor {view} = make_tensor({frag}.data(), Traits::FragLayout{x}View{{}});"
            f"  // (CPY, CPY_{mn}, CPY_K)"
        )
    else:
        w.line(f"Tensor {view} = smem_thr_copy_{x}.retile_D({frag});  // (CPY, CPY_{mn}, CPY_K)")


def _q_to_reg(e: Emit, phase: str) -> None:
    w = e.w
    w.line()
    with e.tag("q_to_reg", "ldmatrix; slices are loaded inside the GEMM, one k-step ahead"):
        w.line("typename Traits::TiledMma tiled_mma;")
        w.line("auto thr_mma = tiled_mma.get_thread_slice(tidx);")
        if e.fragments_written:
            w.line("typename Traits::SmemCopyAtom smem_copy_atom;  // ldmatrix, for Q and K")
        derived = "thr_mma.partition_fragment_A(make_tensor(sQ.data().get(), Traits::SmemLayoutQNoSwizzle{}))"
        _operand_to_reg(e, "Q", "M", derived, "make_tiled_copy_A", "(CPY, CPY_M, CPY_K)")


def _k_to_reg(e: Emit, phase: str) -> None:
    with e.tag("k_to_reg", "ldmatrix, inside the GEMM"):
        derived = (
            "thr_mma.partition_fragment_B("
            "make_tensor(sK.data().get(), Traits::SmemLayoutKNoSwizzle{})(_, _, 0))"
        )
        _operand_to_reg(e, "K", "N", derived, "make_tiled_copy_B", "(CPY, CPY_N, CPY_K, kStages)")


def _v_to_reg(e: Emit, phase: str) -> None:
    w = e.w
    if phase != "setup":
        return
    with e.tag("v_to_reg", "ldmatrix.trans of Vᵀ, a transposed view of sV (no data moves)"):
        w.line(
            "Tensor sVt = make_tensor(sV.data(), Traits::SmemLayoutVt{});  // (kHeadDimV, kBlockN, kStages)"
        )
        if e.fragments_written:
            w.line("Tensor tOrVt = make_tensor<Element>(Traits::FragLayoutVt{});  // (MMA, MMA_N_V, MMA_K_V)")
            w.line("typename Traits::SmemCopyAtomTransposed smem_copy_atom_t;  // ldmatrix.trans")
            w.line(
                "Tensor tOsVt = tl::thr_partition(sVt, Traits::LdsmLayoutVt{}, tidx);"
                "  // (CPY, CPY_N_V, CPY_K_V, kStages)"
            )
            w.line("Tensor tOrVt_view = make_tensor(tOrVt.data(), Traits::FragLayoutVtView{});")
            return
        w.line("Tensor sVtNoSwizzle = make_tensor(sV.data().get(), Traits::SmemLayoutVtNoSwizzle{});")
        w.line(
            "Tensor tOrVt = thr_mma.partition_fragment_B(sVtNoSwizzle(_, _, 0));  // (MMA, MMA_N_V, MMA_K_V)"
        )
        w.line(
            "auto smem_tiled_copy_V = make_tiled_copy_B(typename "
            "Traits::SmemCopyAtomTransposed{}, tiled_mma);"
        )
        w.line("auto smem_thr_copy_V = smem_tiled_copy_V.get_thread_slice(tidx);")
        w.line("Tensor tOsVt = smem_thr_copy_V.partition_S(sVt);  // (CPY, CPY_N_V, CPY_K_V, kStages)")
        w.line("Tensor tOrVt_view = smem_thr_copy_V.retile_D(tOrVt);")


def _alloc_acc_o(e: Emit, phase: str) -> None:
    w = e.w
    w.line()
    with e.tag("alloc_acc_o", "fp32 accumulator fragment"):
        if e.fragments_written:
            w.line("Tensor acc_o = make_tensor<float>(Traits::AccLayoutO{});  // (MMA, MMA_M, MMA_N_V)")
        else:
            w.line(
                "Tensor acc_o = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kHeadDimV>>{});"
                "  // (MMA, MMA_M, MMA_N_V)"
            )
        w.line("clear(acc_o);")


def _alloc_s(e: Emit, phase: str) -> None:
    with e.tag("alloc_s", "fp32 scores of this key block"):
        if e.fragments_written:
            e.w.line("Tensor acc_s = make_tensor<float>(Traits::AccLayoutS{});  // (MMA, MMA_M, MMA_N)")
        else:
            e.w.line(
                "Tensor acc_s = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kBlockN>>{});"
                "  // (MMA, MMA_M, MMA_N)"
            )
        e.w.line("clear(acc_s);")


def _scale(e: Emit, phase: str) -> None:
    w = e.w
    if phase == "setup" and e.reg is not None:
        folded = e.reg.fold is not None
        note = "folded into Softmax's exp2" if folded else "the score region writes log2-domain scores"
        with e.tag("scale" if e.plan.step("scale") else "score_mod", note):
            w.line(f"const float scale_log2 = {e.reg.scale_log2()};")
    elif phase == "setup":
        with e.tag("scale", "folded into Softmax's exp2: one FFMA per score"):
            w.line("const float scale_log2 = softmax_scale * 1.44269504088896340736f;  // scale · log2(e)")
    else:
        with e.tag("scale", "applied inside the exp2 below (scores · scale_log2 − max · scale_log2)"):
            pass


def _softmax(e: Emit, phase: str) -> None:
    w = e.w
    if e.reg is not None and not e.reg.softmax:
        return  # no Softmax: the score region wrote the weights themselves
    if phase == "setup":
        with e.tag("softmax", "running row max and row sum (per thread, for its rows)"):
            w.line("Tensor row_max = make_tensor<float>(Shape<Int<kRowsPerThread>>{});")
            w.line("Tensor row_sum = make_tensor<float>(Shape<Int<kRowsPerThread>>{});")
            w.line("fill(row_max, -__int_as_float(0x7f800000));")
            w.line("clear(row_sum);")
        return
    with e.tag("softmax", "online: new row max, rescale acc_o and the sum, exponentiate with exp2"):
        w.line("Tensor scores = make_tensor(acc_s.data(), tl::acc_rowcol(acc_s.layout()));  // (rows, cols)")
        w.line("Tensor acc_o_rowcol = make_tensor(acc_o.data(), tl::acc_rowcol(acc_o.layout()));")
        w.line("Tensor row_max_prev = make_fragment_like(row_max);")
        w.line("cute::copy(row_max, row_max_prev);")
        w.line("CUTE_UNROLL")
        with w.block("for (int r = 0; r < size<0>(scores); ++r)"):
            w.line("float m = row_max(r);")
            w.line("CUTE_UNROLL")
            w.line("for (int c = 0; c < size<1>(scores); ++c) m = fmaxf(m, scores(r, c));")
            w.line("row_max(r) = tl::quad_max(m);")
        w.line("CUTE_UNROLL")
        with w.block("for (int r = 0; r < size<0>(scores); ++r)"):
            if e.masked:
                w.line(
                    "// in a masked block a row may have seen no key yet (max = -inf): exponentiate against 0"
                )
                w.line(
                    "const float m_scaled = row_max(r) == -__int_as_float(0x7f800000) ? 0.f "
                    ": row_max(r) * scale_log2;"
                )
            else:
                w.line("const float m_scaled = row_max(r) * scale_log2;")
            w.line("const float correction = tl::exp2_approx(row_max_prev(r) * scale_log2 - m_scaled);")
            w.line("row_sum(r) *= correction;")
            w.line("CUTE_UNROLL")
            w.line("for (int c = 0; c < size<1>(acc_o_rowcol); ++c) acc_o_rowcol(r, c) *= correction;")
            w.line("CUTE_UNROLL")
            with w.block("for (int c = 0; c < size<1>(scores); ++c)"):
                w.line("scores(r, c) = tl::exp2_approx(scores(r, c) * scale_log2 - m_scaled);")
                w.line("row_sum(r) += scores(r, c);  // this thread's columns; the quad sums at the end")


def _reshape(e: Emit, phase: str) -> None:
    with e.tag("reshape", "P in the input dtype, its registers re-viewed as the A operand"):
        e.w.line("Tensor rP = tl::convert_fragment<Element>(acc_s);")
        e.w.line(
            "Tensor tOrP = make_tensor(rP.data(), tl::acc_to_A(rP.layout()));  // (MMA_A, MMA_M, MMA_K_V)"
        )


def _gemm(e: Emit, phase: str, kind: str) -> None:
    w = e.w
    if kind == "gemm_qk":
        stage = "stage" if e.plan.stages == 2 else "0"
        a, a_src, a_view, b, b_src, b_view, acc = (
            "tSrQ",
            "tSsQ(_, _, {k})",
            "tSrQ_view",
            "tSrK",
            f"tSsK(_, _, {{k}}, {stage})",
            "tSrK_view",
            "acc_s",
        )
        qc, kc = (
            ("smem_copy_atom", "smem_copy_atom")
            if e.fragments_written
            else ("smem_tiled_copy_Q", "smem_tiled_copy_K")
        )
        copies = ((qc, a_src, a_view), (kc, b_src, b_view))
        note = "S = Q·Kᵀ; ldmatrix of k-slice k+1 overlaps the MMAs of slice k"
    else:
        a, b, acc = "tOrP", "tOrVt", "acc_o"
        copies = (
            (
                "smem_copy_atom_t" if e.fragments_written else "smem_tiled_copy_V",
                "tOsVt(_, _, {k}, %s)" % ("stage" if e.plan.stages == 2 else "0"),
                "tOrVt_view",
            ),
        )
        note = "acc_o += P·V; P from registers, Vᵀ by ldmatrix.trans one k-slice ahead"
    with e.tag(kind, note):
        for tc, src, view in copies:
            w.line(f"cute::copy({tc}, {src.format(k=0)}, {view}(_, _, 0));")
        w.line("CUTE_UNROLL")
        with w.block(f"for (int k = 0; k < size<2>({a}); ++k)"):
            with w.block(f"if (k + 1 < size<2>({a}))"):
                for tc, src, view in copies:
                    w.line(f"cute::copy({tc}, {src.format(k='k + 1')}, {view}(_, _, k + 1));")
            w.line(f"cute::gemm(tiled_mma, {a}(_, _, k), {b}(_, _, k), {acc});")


def _mask(e: Emit, phase: str) -> None:
    """-inf on scores past seqlen_k and, for causal/window, outside the band; only in masked iterations."""
    w, p = e.w, e.plan
    tag = "loop" if p.mask == "none" else "mask"
    if phase == "setup":
        with e.tag(tag, "(row, col) of each score, and which key blocks need the mask"):
            identity = "make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{})"
            scs = (
                f"tl::partition_C(thr_mma, {identity}, Traits::CoordLayoutS{{}})"
                if e.fragments_written
                else f"thr_mma.partition_C({identity})"
            )
            w.line(f"Tensor tScS = {scs};  // (MMA, MMA_M, MMA_N) -> (row, col)")
            if e.reg is not None:
                regions.emit_score_lambda(w, e.reg, tag_line=e.line_of("score_mod") or e.line_of("mask_expr"))
            if e.by_class:
                return
            if p.mask == "window":
                w.line("// a window has a left edge too: every block is masked")
                return
            need = "(n_block + 1) * kBlockN > seqlen_k"
            if p.mask == "causal":
                need += " || (n_block + 1) * kBlockN - 1 > m_block * kBlockM + seqlen_k - seqlen_q"
            with w.block("auto needs_mask = [&](int n_block)", "};"):
                w.line(f"return {need};")
        return
    conds = ["col >= seqlen_k"]
    if p.mask == "causal":
        conds.append("col > row + seqlen_k - seqlen_q")
    elif p.mask == "window":
        conds.append("(window_right >= 0 && col > row + seqlen_k - seqlen_q + window_right)")
        conds.append("(window_left >= 0 && col < row + seqlen_k - seqlen_q - window_left)")
    note = {
        "none": "key columns past seqlen_k (last block only)",
        "causal": "bottom-right causal mask and the seqlen_k tail",
        "window": "sliding window (bottom-right aligned) and the seqlen_k tail",
    }[p.mask]
    if e.reg is not None:
        with e.tag("score_mod" if e.plan.step("score_mod") else tag, note):
            w.line(f"apply_score(acc_s, n_block, cute::{'true' if e.masked else 'false'}_type{{}});")
        return
    if not e.masked:
        return
    with e.tag(tag, note):
        w.line("CUTE_UNROLL")
        with w.block("for (int i = 0; i < size(acc_s); ++i)"):
            w.line("const int row = m_block * kBlockM + get<0>(tScS(i));")
            w.line("const int col = n_block * kBlockN + get<1>(tScS(i));")
            w.line(f"if ({' || '.join(conds)}) acc_s(i) = -__int_as_float(0x7f800000);")


def _loop(e: Emit, phase: str) -> None:
    """The key loop, written twice like FA2's: first the blocks that need the mask (the seqlen_k tail, the
    causal diagonal; every block for a window), then the rest with no mask code and no copy predicates."""
    w, p = e.w, e.plan
    w.line()
    if e.by_class:
        _loop_by_class(e)
        return
    with e.tag("loop", "key blocks from the highest down (FA2): blocks needing the mask come first"):
        w.line("int n_block = n_block_max - 1;")
        if p.stages == 2:
            w.line("int stage = 0;  // the K/V buffers holding this block")
        w.line("CUTE_NO_UNROLL")
        cond = "" if p.mask == "window" else " && needs_mask(n_block)"
        w.line(f"for (; n_block >= n_block_min{cond}; --n_block) {{")
    with w.indent():
        _body(e, masked=True)
    with e.tag("loop"):
        w.line("}")
    if p.mask == "window":
        return
    with e.tag("loop", "the remaining blocks are fully visible: no mask, no predicates"):
        w.line("CUTE_NO_UNROLL")
        w.line("for (; n_block >= n_block_min; --n_block) {")
    with w.indent():
        _body(e, masked=False)
    with e.tag("loop"):
        w.line("}")


def _loop_by_class(e: Emit) -> None:
    """Key blocks from the highest down, skipping the ones the masks empty; a block the masks keep
    whole runs the body without the per-score mask."""
    w, p = e.w, e.plan
    with e.tag("loop", "key blocks from the highest down, each classified by the masks (empty: skipped)"):
        w.line("int n_block = n_block_max - 1;")
        if p.stages == 2:
            w.line("int stage = 0;  // the K/V buffers holding this block")
        w.line("CUTE_NO_UNROLL")
        w.line("while (n_block >= n_block_min) {")
    with w.indent():
        with e.tag("loop"):
            w.line("const int n_next = next_block(n_block);  // the block after this one (or none)")
            w.line("if (block_class(n_block) == 1) {")
        with w.indent():
            _body(e, masked=True)
        with e.tag("loop"):
            w.line("} else {")
        with w.indent():
            _body(e, masked=False)
        with e.tag("loop"):
            w.line("}")
            w.line("n_block = n_next;")
    with e.tag("loop"):
        w.line("}")


def _body(e: Emit, *, masked: bool) -> None:
    w, staged = e.w, e.plan.stages == 2
    e.masked = masked
    e.run("alloc_s", "loop")
    if staged:
        with e.tag(
            "loop", "K(n_block) has landed (its V may still fly); every warp is done with the other buffers"
        ):
            e.wait(1)
            w.line("__syncthreads();")
        e.run("load_k", "prefetch2")
        e.run("load_v", "prefetch2")
    else:
        with e.tag("loop", "K(n_block) has landed; every warp is done with sV"):
            e.wait(0)
            w.line("__syncthreads();")
        e.run("load_v", "issue")
    e.run("gemm_qk", "loop")
    e.run("mask", "loop")
    with e.tag("loop", "V(n_block) has landed; every warp is done reading this K buffer"):
        if staged and e.facts.cp_async:
            w.line(f"if ({e.has_next}) {{ cute::cp_async_wait<2>(); }} else {{ cute::cp_async_wait<0>(); }}")
        else:
            e.wait(0)
        w.line("__syncthreads();")
    if not staged:
        e.run("load_k", "prefetch1")
    e.run("scale", "loop")
    e.run("softmax", "loop")
    e.run("reshape", "loop")
    e.run("gemm_pv", "loop")
    if staged:
        with e.tag("loop"):
            w.line("stage ^= 1;")


def _normalize(e: Emit, phase: str) -> None:
    w = e.w
    w.line()
    with e.tag("normalize", "and the row log-sum-exp; a row that saw no key gets O = 0, LSE = +inf"):
        if e.reg is not None:
            regions.emit_normalize(w, e.reg, "thr_mma", e.coord_layout_o)
        else:
            emit_normalize_rows(w)


def _store_o(e: Emit, phase: str) -> None:
    w, p = e.w, e.plan
    w.line()
    reuse = p.head_dim_v <= p.head_dim_qk
    with e.tag("store_o", "registers → shared (dtype) → 128-bit global stores, rows past seqlen_q skipped"):
        w.line("Tensor rO = tl::convert_fragment<Element>(acc_o);")
        if reuse:
            w.line(
                "Tensor sO = make_tensor(sQ.data(), Traits::SmemLayoutO{});  // reuses Q's "
                "buffer: Q·Kᵀ is done"
                "  // (kBlockM, kHeadDimV)"
            )
        else:
            w.line(
                "Tensor sO = make_tensor(sV.data() + size(sV), Traits::SmemLayoutO{});  // "
                "(kBlockM, kHeadDimV)"
            )
        if e.fragments_written:
            w.comment("the atom make_tiled_copy_C's copy calls, on its partitions (Traits::StoreLayoutO/R)")
            w.line("typename Traits::SmemCopyAtomO smem_copy_atom_O;")
            w.line("cute::copy(smem_copy_atom_O, make_tensor(rO.data(), Traits::StoreLayoutOR{}),")
            w.line("           tl::thr_partition(sO, Traits::StoreLayoutO{}, tidx));")
        else:
            w.line("auto smem_tiled_copy_O = make_tiled_copy_C(typename Traits::SmemCopyAtomO{}, tiled_mma);")
            w.line("auto smem_thr_copy_O = smem_tiled_copy_O.get_thread_slice(tidx);")
            w.line("cute::copy(smem_tiled_copy_O, smem_thr_copy_O.retile_S(rO),")
            w.line("           smem_thr_copy_O.partition_D(sO));")
        w.line()
        if e.reg is None or e.reg.softmax:
            emit_store_lse(w, "thr_mma", coord_layout=e.coord_layout_o)
        w.line("__syncthreads();  // sO complete before it is read in another thread layout")
        w.line()
        w.line(
            "Tensor gO = local_tile(mO, Shape<Int<kBlockM>, Int<kHeadDimV>>{}, make_coord(m_block, 0));"
            "  // (kBlockM, kHeadDimV)"
        )
        w.line("typename Traits::GmemTiledCopyO gmem_tiled_copy_O;")
        w.line("auto gmem_thr_copy_O = gmem_tiled_copy_O.get_thread_slice(tidx);")
        to = e.partition("gmem_thr_copy_O", "partition_S", "sO", "O")
        w.line(f"Tensor tOsO = {to};  // (OCPY, OCPY_M, OCPY_K)")
        w.line("Tensor tOgO = gmem_thr_copy_O.partition_D(gO);  // (OCPY, OCPY_M, OCPY_K)")
        w.line("Tensor tOrO = make_tensor<Element>(shape(tOgO));")
        w.line("cute::copy(gmem_tiled_copy_O, tOsO, tOrO);")
        co = e.partition(
            "gmem_thr_copy_O",
            "partition_D",
            "make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDimV>>{})",
            "O",
            True,
        )
        w.line(f"Tensor tOcOg = {co};")
        w.line("CUTE_UNROLL")
        with (
            w.block("for (int m = 0; m < size<1>(tOgO); ++m)"),
            w.block("if (get<0>(tOcOg(0, m, 0)) < q_rows)"),
        ):
            w.line("cute::copy(gmem_tiled_copy_O, tOrO(_, m, _), tOgO(_, m, _));")


EMITTERS: dict[str, Callable[[Emit, str], None]] = {
    "globals": _globals,
    "key_range": _key_range,
    "load_q": _load_q,
    "load_k": _load_k,
    "load_v": _load_v,
    "q_to_reg": _q_to_reg,
    "k_to_reg": _k_to_reg,
    "v_to_reg": _v_to_reg,
    "alloc_acc_o": _alloc_acc_o,
    "alloc_s": _alloc_s,
    "scale": _scale,
    "softmax": _softmax,
    "mask": _mask,
    "reshape": _reshape,
    "gemm_qk": lambda e, ph: _gemm(e, ph, "gemm_qk"),
    "gemm_pv": lambda e, ph: _gemm(e, ph, "gemm_pv"),
    "loop": _loop,
    "normalize": _normalize,
    "store_o": _store_o,
}

# Where each step's code goes, in kernel order (the loop runs its own body).
SCHEDULE: tuple[tuple[str, str], ...] = (
    ("globals", "setup"),
    ("key_range", "setup"),
    ("load_q", "setup"),
    ("load_k", "setup"),
    ("load_v", "setup"),
    ("load_k", "prologue"),
    ("load_v", "prologue"),
    ("q_to_reg", "setup"),
    ("k_to_reg", "setup"),
    ("v_to_reg", "setup"),
    ("alloc_acc_o", "setup"),
    ("scale", "setup"),
    ("softmax", "setup"),
    ("mask", "setup"),
    ("loop", "loop"),
    ("normalize", "epilogue"),
    ("store_o", "epilogue"),
)
