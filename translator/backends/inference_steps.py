"""The inference kernel's own steps: where its rows, keys and results live.

The loop, the GEMMs, the softmax and the Reshape are the mma.sync forward's emitters (`sm80_steps`);
this module replaces the steps that change when a tile is no longer one (batch, head)'s contiguous slice:

- rows: with packed GQA, tile row r is query row r / group of query head kv_head · group + r % group;
- keys: the sequence's own length (cache_seqlens, cu_seqlens_k), split over `num_splits` blocks, each
  row read from its page (block table) or its packed offset, by `cp.async` row by row;
- results: O and LSE directly with one split, else fp32 partials the combine kernel merges by LSE.
"""

from __future__ import annotations

from collections.abc import Callable

from kernel_ir.program import CAUSAL_MASK
from tl_language.inference import Inference
from translator.backends import regions
from translator.backends.regions import Regions
from translator.backends.sm80_steps import EMITTERS, Emit

NEG_INF = "-__int_as_float(0x7f800000)"
POS_INF = "__int_as_float(0x7f800000)"


class InferenceEmit(Emit):
    """`Emit` with the inference steps in front of the forward's table."""

    def __post_init__(self) -> None:
        # Always a renderer, even for the plain program: its masks carry the per-sequence lengths.
        self.reg = Regions(self.plan.ir, dims={"seqlen_q": "max_seqlen_q", "seqlen_k": "max_seqlen_k"})

    @property
    def inf(self) -> Inference:
        assert self.plan.inference is not None
        return self.plan.inference

    @property
    def by_class(self) -> bool:
        return False  # the key range is the split's; masks run per score (see `_needs_mask`)

    def run(self, kind: str, phase: str) -> None:
        own = STEPS.get(kind)
        if own is not None and (kind not in SETUP_ONLY or phase == "setup"):
            own(self, phase)
        else:
            EMITTERS[kind](self, phase)


def _globals(e: InferenceEmit, phase: str) -> None:
    w, inf = e.w, e.inf
    w.line()
    with e.tag("alloc_q", "this block's tile: (split, query tile) · batch · head"):
        w.line("const int group_size = heads / heads_kv;  // query heads per K/V head")
        w.line("const int m_block = blockIdx.x / num_splits;  // TL block_m")
        w.line("const int n_split = blockIdx.x % num_splits;  // which part of the key range")
        w.line("const int bidb = blockIdx.y;")
        if inf.pack_gqa:
            w.line(
                "const int bidh_kv = blockIdx.z;  // packed GQA: the tile's rows are this K/V head's queries"
            )
            w.line("const int bidh = bidh_kv * group_size;  // the first query head of the group")
        else:
            w.line("const int bidh = blockIdx.z;")
            w.line("const int bidh_kv = bidh / group_size;")
    with e.tag("alloc_k", "this sequence's lengths"):
        if inf.varlen:
            w.line("const int q_start = cu_seqlens_q[bidb];  // packed batch: the sequence's first row")
            w.line("const int k_start = cu_seqlens_k[bidb];")
            w.line("const int seqlen_q = cu_seqlens_q[bidb + 1] - q_start;")
            w.line("const int seqlen_k = cu_seqlens_k[bidb + 1] - k_start;")
        else:
            w.line("const int seqlen_q = max_seqlen_q;")
            w.line("const int seqlen_k = cache_seqlens != nullptr ? cache_seqlens[bidb] : max_seqlen_k;")
        rows = "seqlen_q * group_size" if inf.pack_gqa else "seqlen_q"
        w.line(f"const int tile_rows = {rows};  // rows of this (batch, head) tile space")
        w.line("if (m_block * kBlockM >= tile_rows) return;  // a shorter sequence of a packed batch")
    regions.emit_uniforms(w, e.reg, tag_line=e.line_of("score_mod") or e.line_of("mask_expr"))  # type: ignore[arg-type]
    with e.tag("alloc_q", "the global row of each tile row"):
        q_base = "static_cast<Element const*>(q)"
        q_base += " + q_start * q_row_stride" if inf.varlen else " + bidb * q_batch_stride"
        w.line(f"Element const* q_base = {q_base};")
        with w.block("auto q_row_ptr = [&](int r) -> Element const*", "};"):
            if inf.pack_gqa:
                w.line(
                    "return q_base + (r / group_size) * q_row_stride + (bidh + r % group_size) * "
                    "q_head_stride;"
                )
            else:
                w.line("return q_base + r * q_row_stride + bidh * q_head_stride;")
    for name in ("k", "v"):
        kind = f"alloc_{name}"
        if inf.page_size:
            note = f"paged: key j is row j % {inf.page_size} of page block_table[b, j / {inf.page_size}]"
        else:
            note = "the sequence's keys, contiguous"
        with e.tag(kind, note):
            base = f"static_cast<Element const*>({name}) + bidh_kv * {name}_head_stride"
            if not inf.page_size:
                base += f" + k_start * {name}_row_stride" if inf.varlen else f" + bidb * {name}_batch_stride"
            w.line(f"Element const* {name}_base = {base};")
            with w.block(f"auto {name}_row_ptr = [&](int key) -> Element const*", "};"):
                if inf.page_size:
                    w.line("const int page = block_table[bidb * max_pages + key / kPageSize];")
                    w.line(
                        f"return {name}_base + page * {name}_batch_stride + (key % kPageSize) * "
                        f"{name}_row_stride;"
                    )
                else:
                    w.line(f"return {name}_base + key * {name}_row_stride;")


def _key_range(e: InferenceEmit, phase: str) -> None:
    w = e.w
    w.line()
    with e.tag("loop", "key blocks [n_block_min, n_block_max): this split's share of the sequence's keys"):
        w.line("int n_block_max = cute::ceil_div(seqlen_k, kBlockN);")
        if e.plan.ir.header_mask == "causal":
            div = " / group_size" if e.inf.pack_gqa else ""
            w.line(
                f"const int q_row_hi = (min(tile_rows, (m_block + 1) * kBlockM) - 1){div};  // "
                f"causal: the last row"
            )
            w.line(
                "n_block_max = min(n_block_max, cute::ceil_div(max(0, q_row_hi + 1 + seqlen_k - "
                "seqlen_q), kBlockN));"
            )
        w.line("const int blocks_per_split = cute::ceil_div(n_block_max, num_splits);")
        w.line("const int n_block_min = min(n_block_max, n_split * blocks_per_split);")
        w.line("n_block_max = min(n_block_max, n_block_min + blocks_per_split);")


def _load_q(e: InferenceEmit, phase: str) -> None:
    w = e.w
    w.line()
    with e.tag("load_q", "cp.async row by row into swizzled smem; rows past the tile are zero-filled"):
        w.line(
            "Tensor sQ = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(smem)), Traits::SmemLayoutQ{});"
            "  // (kBlockM, kHeadDimQK)"
        )
        w.line("typename Traits::GmemTiledCopyQK gmem_tiled_copy_QK;")
        w.line("auto gmem_thr_copy_QK = gmem_tiled_copy_QK.get_thread_slice(tidx);")
        w.line("Tensor tQsQ = gmem_thr_copy_QK.partition_D(sQ);  // (QCPY, QCPY_M, QCPY_K)")
        w.line(
            "Tensor tQcQ = gmem_thr_copy_QK.partition_S(make_identity_tensor(Shape<Int<kBlockM>, "
            "Int<kHeadDimQK>>{}));  // (row, col) of each 16-byte vector"
        )
        w.line("CUTE_UNROLL")
        with w.block("for (int m = 0; m < size<1>(tQsQ); ++m)"):
            w.line("const int r = m_block * kBlockM + get<0>(tQcQ(0, m, 0));")
            w.line("const bool in = r < tile_rows;")
            w.line("Element const* src = q_row_ptr(in ? r : 0);")
            w.line("CUTE_UNROLL")
            w.line(
                "for (int kk = 0; kk < size<2>(tQsQ); ++kk) "
                "tl::cp_async_16(&tQsQ(0, m, kk), src + get<1>(tQcQ(0, m, kk)), in);"
            )


def _load_kv(e: InferenceEmit, name: str) -> None:
    """Setup of K or V: the staged shared buffers and `load_<N>(n_block, stage, predicated)`, which
    copies one key block row by row (each row's address from `<n>_row_ptr`); `predicated` zero-fills
    the rows past seqlen_k (only the sequence's last block has them), so 0·P stays 0."""
    w = e.w
    up, lo = name.upper(), name
    dim, after, copy = (
        ("kHeadDimQK", "sQ", "gmem_thr_copy_QK") if lo == "k" else ("kHeadDimV", "sK", "gmem_thr_copy_V")
    )
    w.line()
    with e.tag(f"load_{lo}", f"{e.plan.stages} {up} buffer(s) after {after}'s"):
        w.line(
            f"Tensor s{up} = make_tensor({after}.data() + size({after}), Traits::SmemLayout{up}{{}});"
            f"  // (kBlockN, {dim}, kStages)"
        )
        if lo == "v":
            w.line("typename Traits::GmemTiledCopyV gmem_tiled_copy_V;")
            w.line("auto gmem_thr_copy_V = gmem_tiled_copy_V.get_thread_slice(tidx);")
        w.line(f"Tensor t{up}s{up} = {copy}.partition_D(s{up});  // (CPY, CPY_N, CPY_K, kStages)")
        w.line(
            f"Tensor t{up}c{up} = {copy}.partition_S(make_identity_tensor(Shape<Int<kBlockN>, "
            f"Int<{dim}>>{{}}));"
        )
        with w.block(f"auto load_{up} = [&](int n_block, int stage, auto predicated)", "};"):
            w.line("CUTE_UNROLL")
            with w.block(f"for (int n = 0; n < size<1>(t{up}s{up}); ++n)"):
                w.line(f"const int key = n_block * kBlockN + get<0>(t{up}c{up}(0, n, 0));")
                w.line("const bool in = !decltype(predicated)::value || key < seqlen_k;")
                w.line(f"Element const* src = {lo}_row_ptr(in ? key : 0);")
                w.line("CUTE_UNROLL")
                w.line(
                    f"for (int kk = 0; kk < size<2>(t{up}s{up}); ++kk) "
                    f"tl::cp_async_16(&t{up}s{up}(0, n, kk, stage), src + get<1>(t{up}c{up}(0, n, kk)), in);"
                )


def _mask(e: InferenceEmit, phase: str) -> None:
    w, reg = e.w, e.reg
    assert reg is not None
    if phase == "setup":
        with e.tag("mask" if e.plan.mask != "none" else "loop", "(row, col) of each score; the score region"):
            w.line(
                "Tensor tScS = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, "
                "Int<kBlockN>>{}));"
                "  // (MMA, MMA_M, MMA_N) -> (row, col)"
            )
            row = "m_block * kBlockM + get<0>(coords(r, 0))"
            if e.inf.pack_gqa:
                row = f"({row}) / group_size"
            regions.emit_score_lambda(
                w, reg, tag_line=e.line_of("score_mod") or e.line_of("mask_expr"), row=row
            )
            with w.block("auto needs_mask = [&](int n_block)", "};"):
                w.line(f"return {_needs_mask(e)};")
        return
    if not e.masked and reg.value is None:
        return  # a plain score in a block the masks keep whole: nothing to do
    with e.tag("score_mod" if e.plan.step("score_mod") else "loop", "the score region and the masks"):
        w.line(f"apply_score(acc_s, n_block, cute::{'true' if e.masked else 'false'}_type{{}});")


def _needs_mask(e: InferenceEmit) -> str:
    """Which blocks run the masks per score: the sequence's last block, the causal diagonal's, and every
    block under any other mask (no interval classification: decode reads each block once anyway)."""
    tail = "(n_block + 1) * kBlockN > seqlen_k"
    masks = e.plan.ir.masks
    if not masks:
        return tail
    if masks == (CAUSAL_MASK,):
        div = " / group_size" if e.inf.pack_gqa else ""
        return f"{tail} || (n_block + 1) * kBlockN - 1 > (m_block * kBlockM){div} + seqlen_k - seqlen_q"
    return "true"


def _store_o(e: InferenceEmit, phase: str) -> None:
    w, inf, softmax = e.w, e.inf, e.reg is not None and e.reg.softmax
    w.line()
    with e.tag("store_o", "O and LSE from registers; with several splits, fp32 partials for the combine"):
        w.line("cute::cp_async_wait<0>();  // a split without keys still has Q's copy in flight")
        w.line(
            "Tensor tOcO = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDimV>>{}));"
        )
        w.line("Tensor tOcO_rc = make_tensor(tOcO.data(), tl::acc_rowcol(tOcO.layout()));  // (row, col)s")
        w.line("CUTE_UNROLL")
        with w.block("for (int r = 0; r < size<0>(acc_o_rowcol); ++r)"):
            w.line("const int tr = m_block * kBlockM + get<0>(tOcO_rc(r, 0));")
            w.line("if (tr >= tile_rows) continue;  // padding rows of the tile")
            if inf.pack_gqa:
                w.line("const int q_row = tr / group_size;")
                w.line("const int head = bidh + tr % group_size;")
            else:
                w.line("const int q_row = tr;")
                w.line("const int head = bidh;")
            w.line("const bool first_col = get<1>(tOcO_rc(r, 0)) == 0;  // this thread writes the row's LSE")
            direct = "num_splits == 1" if softmax else "true"
            with w.block(f"if ({direct})"):
                row = (
                    "(q_start + q_row) * o_row_stride"
                    if inf.varlen
                    else "bidb * o_batch_stride + q_row * o_row_stride"
                )
                w.line(f"Element* out = static_cast<Element*>(o) + {row} + head * o_head_stride;")
                w.line("CUTE_UNROLL")
                w.line(
                    "for (int c = 0; c < size<1>(acc_o_rowcol); ++c) "
                    "out[get<1>(tOcO_rc(r, c))] = static_cast<Element>(acc_o_rowcol(r, c));"
                )
                if softmax:
                    lse = (
                        "static_cast<long long>(head) * cu_seqlens_q[batch] + q_start + q_row"
                        if inf.varlen
                        else "(static_cast<long long>(bidb) * heads + head) * max_seqlen_q + q_row"
                    )
                    w.line(f"if (first_col) lse[{lse}] = row_lse(r);")
            if softmax:
                with w.block("else", "}"):
                    w.line(
                        "const long long idx = ((static_cast<long long>(n_split) * batch + bidb) * heads "
                        "+ head) * max_seqlen_q + q_row;"
                    )
                    w.line("float* out = o_accum + idx * kHeadDimV;")
                    w.line("CUTE_UNROLL")
                    w.line(
                        "for (int c = 0; c < size<1>(acc_o_rowcol); ++c) out[get<1>(tOcO_rc(r, c))] = "
                        "acc_o_rowcol(r, c);"
                    )
                    w.line(
                        f"if (first_col) lse_accum[idx] = row_lse(r) == {POS_INF} ? {NEG_INF} : row_lse(r);"
                    )


STEPS: dict[str, Callable[[InferenceEmit, str], None]] = {
    "globals": _globals,
    "key_range": _key_range,
    "load_q": _load_q,
    "load_k": lambda e, ph: _load_kv(e, "k"),
    "load_v": lambda e, ph: _load_kv(e, "v"),
    "mask": _mask,
    "store_o": _store_o,
}
SETUP_ONLY = frozenset({"load_k", "load_v"})  # their prologue and prefetch phases are the forward's
