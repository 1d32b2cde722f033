"""Device helpers emitted once per file (namespace `tl`): register-layout views and warp reductions.

They are the register-level meaning of TL statements that have no single CuTe call: the row view used by
Softmax, the accumulator → A-operand view that *is* the TL Reshape, and the quad reductions of a row.
"""

from __future__ import annotations

from translator.backends.row_helpers import emit_partition_c, emit_row_helpers
from translator.writer import CodeWriter


def emit_helpers(w: CodeWriter, mma_k: int, regions: bool = False, partitions: bool = False) -> None:
    """`partitions`: the traits write out the copies' thread layouts (`sm80_steps.fragment_layouts`), so
    the kernel partitions with `tl::thr_partition`."""
    with w.block("namespace tl", "}  // namespace tl"):
        w.line("using namespace cute;")
        w.line()
        if partitions:
            w.comment("CuTe's ThrCopy::partition_S / _D with the layout TiledCopy::tidfrg_S / _D derives")
            w.comment("given as a type: the same slice at the thread's index, so the same address arithmetic")
            w.comment("(a swizzled tile's too), without the tiled copy's layout algebra.")
            w.line("template <class Tensor_, class ThrFrg>")
            with w.block("CUTE_DEVICE auto thr_partition(Tensor_&& t, ThrFrg thrfrg, int thr_idx)"):
                w.line("auto thr_tensor = make_tensor(static_cast<Tensor_&&>(t).data(), thrfrg);")
                w.line("return thr_tensor(thr_idx, _, repeat<rank_v<Tensor_>>(_));")
            w.line()
            emit_partition_c(w)
            w.line()
        w.comment("The m16n8 accumulator of one thread, ((2 cols, 2 rows), MMA_M, MMA_N), seen as")
        w.comment("((2, MMA_M) rows, (2, MMA_N) cols), so Softmax can walk rows and columns.")
        w.line("template <class Layout>")
        with w.block("CUTE_DEVICE constexpr auto acc_rowcol(Layout acc)"):
            w.line("static_assert(decltype(size<0>(acc))::value == 4);")
            w.line("auto l = logical_divide(acc, Shape<_2>{});  // ((2, 2), MMA_M, MMA_N)")
            w.line(
                "return make_layout(make_layout(get<0, 1>(l), get<1>(l)), "
                "make_layout(get<0, 0>(l), get<2>(l)));"
            )
        w.line()
        w.comment("TL `Reshape S from (MMA_C, …) to (MMA_A, …)`: the accumulator registers re-viewed as the")
        if mma_k == 16:
            w.comment("A operand of m16n8k16. Two neighbouring n8 accumulator tiles form one k16 A fragment:")
            w.comment("((2, 2), MMA_M, MMA_N) -> ((2, 2, 2), MMA_M, MMA_N / 2). No data moves.")
        else:
            w.comment("A operand of m16n8k8, whose fragment is exactly one n8 accumulator tile: the layout")
            w.comment("is unchanged. No data moves.")
        w.line("template <class Layout>")
        with w.block("CUTE_DEVICE constexpr auto acc_to_A(Layout acc)"):
            if mma_k == 16:
                w.line("auto l = logical_divide(acc, Shape<Underscore, Underscore, _2>{});")
                w.line("return make_layout(make_layout(get<0>(l), get<2, 0>(l)), get<1>(l), get<2, 1>(l));")
            else:
                w.line("return acc;")
        w.line()
        emit_row_helpers(w, regions)
