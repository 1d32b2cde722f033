"""Device helpers of the Hopper kernel (namespace `tl`), emitted once per file.

The register-level meaning of TL statements on sm_90: the row view of a wgmma accumulator (Softmax), the
accumulator → register-A view that *is* the TL Reshape for the RS wgmma of P·V, the quad reductions, and
one warp-group GEMM that issues a whole K loop of wgmma instructions as one commit group.
"""

from __future__ import annotations

from translator.backends.row_helpers import emit_partition_c, emit_row_helpers
from translator.writer import CodeWriter


def emit_helpers(w: CodeWriter, regions: bool = False, *, gmma_desc: bool = False) -> None:
    """`gmma_desc`: also `gmma_desc` and `partition_C`, operand descriptors and identity partitions
    from layouts the traits write out."""
    with w.block("namespace tl", "}  // namespace tl"):
        w.line("using namespace cute;")
        w.line()
        w.comment("A wgmma accumulator of one thread is ((2 cols, 2 rows, N/8 col groups), MMA_M, MMA_N);")
        w.comment("seen as ((2, MMA_M) rows, (2, N/8, MMA_N) cols) so Softmax can walk rows and columns.")
        w.line("template <class Layout>")
        with w.block("CUTE_DEVICE constexpr auto acc_rowcol(Layout acc)"):
            w.line('static_assert(decltype(rank<0>(acc))::value == 3, "a wgmma (GMMA) accumulator layout");')
            w.line("return make_layout(make_layout(get<0, 1>(acc), get<1>(acc)),")
            w.line("                   make_layout(get<0, 0>(acc), get<0, 2>(acc), get<2>(acc)));")
        w.line()
        w.comment(
            "TL `Reshape S from (MMA_C, …) to (MMA_A, …)` on Hopper: the 16-bit P registers re-viewed as the"
        )
        w.comment("register A operand of the RS wgmma. Column groups n and n+8 form one k16 slice:")
        w.comment("((2, 2, N/8), MMA_M, MMA_N) -> ((2, 2, 2), MMA_M, N/16 · MMA_N). No data moves.")
        w.line("template <class Layout>")
        with w.block("CUTE_DEVICE constexpr auto acc_to_A(Layout acc)"):
            w.line("auto groups = logical_divide(get<0, 2>(acc), Tile<_2>{});  // ((2, N/16))")
            w.line("return make_layout(make_layout(get<0, 0>(acc), get<0, 1>(acc), get<0, 0>(groups)),")
            w.line("                   get<1>(acc),")
            w.line("                   coalesce(make_layout(get<0, 1>(groups), get<2>(acc))));")
        w.line()
        emit_row_helpers(w, regions)
        w.line()
        _emit_descriptor_iterator(w)
        w.line()
        if gmma_desc:
            _emit_gmma_desc(w)
            w.line()
            emit_partition_c(w)
            w.line()
        w.comment("One warp-group GEMM: every k16 slice as a wgmma, one commit group; the caller waits with")
        w.comment(
            "warpgroup_wait<N>. kZeroInit starts from C = 0 (scale-d = 0) instead of clearing registers;"
        )
        w.comment("kRS: A is in registers (P), so fence it too — the wgmma reads it asynchronously.")
        w.line("template <bool kZeroInit, bool kRS, class TiledMma, class TA, class TB, class TC>")
        with w.block("CUTE_DEVICE void wgmma(TiledMma& tiled_mma, TA& tA, TB const& tB, TC& tC)"):
            w.line("if constexpr (kRS) { warpgroup_fence_operand(tA); }")
            w.line("warpgroup_fence_operand(tC);")
            w.line("warpgroup_arrive();")
            w.line("if constexpr (kZeroInit) { tiled_mma.accumulate_ = GMMA::ScaleOut::Zero; }")
            w.line("auto tA_k = desc64(tA);")
            w.line("auto tB_k = desc64(tB);")
            w.line("CUTE_UNROLL")
            with w.block("for (int k = 0; k < size<2>(tA); ++k)"):
                w.line("cute::gemm(tiled_mma, tA_k(_, _, k), tB_k(_, _, k), tC);")
                w.line("tiled_mma.accumulate_ = GMMA::ScaleOut::One;")
            w.line("warpgroup_commit_batch();")
            w.line("warpgroup_fence_operand(tC);")
            w.line("if constexpr (kRS) { warpgroup_fence_operand(tA); }")
        w.line()
        w.comment("A named barrier over the consumer warp groups only (the producer never joins; id 0 is")
        w.comment("__syncthreads).")
        with w.block("CUTE_DEVICE void consumer_sync(int id, int threads)"):
            w.line('asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");')
        w.line()
        w.comment("Signal a named barrier without waiting (the other side calls consumer_sync).")
        with w.block("CUTE_DEVICE void consumer_arrive(int id, int threads)"):
            w.line('asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(threads) : "memory");')
        w.line()
        w.comment("Ends the basic block here. ptxas hoists a wgmma wait to the top of its block, ahead of")
        w.comment("register-only work written before it, so without this the softmax of block n would run")
        w.comment("after P·V(n + 1) has drained instead of beside it. `never` is 0 (seqlen_k >> 30): the")
        w.comment("loop does not run, but the compiler cannot prove that, so the block boundary stays.")
        with w.block("CUTE_DEVICE void block_boundary(int never)"):
            w.line('for (int i = 0; i < never; ++i) asm volatile("nanosleep.u32 1;");')


def _emit_descriptor_iterator(w: CodeWriter) -> None:
    """A GMMA descriptor iterator that steps the whole 64-bit descriptor with one add.

    CuTe's `GMMA::DescriptorIterator` adds to the low 32-bit word only, so ptxas rebuilds every
    descriptor's register pair with a move of the constant high word: three uniform instructions per
    wgmma, inside the ping-pong turn. One 64-bit add is one `UIADD3.64`, as in FA4's SASS."""
    w.comment("A shared-memory operand's GMMA descriptors, stepped k16 slice by k16 slice with one 64-bit")
    w.comment("add (CuTe's DescriptorIterator adds to the low word and re-moves the high one: 3 uniform")
    w.comment("instructions per wgmma instead of 1). The start address never carries into the high word.")
    with w.block("struct Desc64Iterator", "};"):
        w.line("using reference = GmmaDescriptor;")
        w.line("using element_type = GmmaDescriptor;")
        w.line("using value_type = GmmaDescriptor;")
        w.line("GmmaDescriptor desc_;")
        w.line("CUTE_HOST_DEVICE constexpr reference operator*() const { return desc_; }")
        w.line("template <class Index>")
        with w.block("CUTE_HOST_DEVICE constexpr reference operator[](Index const& i) const"):
            w.line("return *(*this + i);")
        w.line("template <class Index>")
        with w.block("CUTE_HOST_DEVICE constexpr Desc64Iterator operator+(Index const& offset) const"):
            w.line("return {GmmaDescriptor{desc_.desc_ + uint64_t(offset)}};")
    w.comment("mma_unpack recasts the operand to its register type (uint64_t); the iterator stays itself.")
    w.line("template <class NewT>")
    w.line("CUTE_HOST_DEVICE constexpr Desc64Iterator recast_ptr(Desc64Iterator const& it) { return it; }")
    w.comment("A descriptor tensor re-based on Desc64Iterator; a register operand (P) as a view of itself.")
    w.line("template <class Tensor_>")
    with w.block("CUTE_DEVICE auto desc64(Tensor_&& t)"):
        w.line("using Iterator = remove_cvref_t<decltype(t.data())>;")
        with w.block("if constexpr (is_base_of_v<GMMA::DescriptorIterator, Iterator>)"):
            w.line("return make_tensor(Desc64Iterator{t.data().desc_}, t.layout());")
        with w.block("else"):
            w.line("return make_tensor(t.data(), t.layout());")


def _emit_gmma_desc(w: CodeWriter) -> None:
    """`gmma_desc`: CuTe's `GMMA::make_gmma_desc` for a swizzled operand tile, its fields set in the same
    order, with the swizzle and the leading and stride byte offsets the caller read off the layout."""
    w.comment("The GMMA descriptor of a swizzled shared tile starting at `smem` (CuTe's make_gmma_desc, its")
    w.comment("fields in the same order); the byte offsets are in 16-byte units.")
    w.line("template <GMMA::LayoutType kLayout>")
    with w.block("CUTE_DEVICE GmmaDescriptor gmma_desc(void const* smem, uint16_t lbo, uint16_t sbo)"):
        w.line("GmmaDescriptor desc;")
        w.line("desc.bitfield.layout_type_ = uint8_t(kLayout);")
        w.line("desc.bitfield.start_address_ = static_cast<uint16_t>(cast_smem_ptr_to_uint(smem) >> 4);")
        w.line("desc.bitfield.base_offset_ = 0;")
        w.line("desc.bitfield.stride_byte_offset_ = sbo;")
        w.line("desc.bitfield.leading_byte_offset_ = lbo;")
        w.line("return desc;")
