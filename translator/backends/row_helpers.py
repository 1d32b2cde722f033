"""What both backends emit for the rows of an accumulator: the helpers inside `namespace tl` (row
reductions, exp2, the dtype conversion), the final division by the row sum with the row LSE, and its store.

The m16n8 (mma.sync) and wgmma accumulators both spread one row over the four threads of a quad, and each
backend's `tl::acc_rowcol` gives the same (rows, cols) view, so this code is the same on every architecture.
"""

from __future__ import annotations

from translator.writer import CodeWriter


def emit_row_helpers(w: CodeWriter, regions: bool = False) -> None:
    w.comment("The four threads of a quad hold one accumulator row between them.")
    with w.block("CUTE_DEVICE float quad_max(float x)"):
        w.line("x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));")
        w.line("return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));")
    w.line()
    with w.block("CUTE_DEVICE float quad_sum(float x)"):
        w.line("x += __shfl_xor_sync(0xffffffff, x, 2);")
        w.line("return x + __shfl_xor_sync(0xffffffff, x, 1);")
    w.line()
    w.comment("2^x in one MUFU instruction, whatever the compile flags (exp2f is exact without fast math).")
    with w.block("CUTE_DEVICE float exp2_approx(float x)"):
        w.line("float y;")
        w.line('asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));')
        w.line("return y;")
    w.line()
    if regions:
        from translator.backends.regions import emit_region_helpers

        emit_region_helpers(w)
    w.comment("Converts a float fragment to the input type in pairs (cvt.rn.{f16,bf16}x2.f32).")
    w.line("template <class To, class Engine, class Layout>")
    with w.block("CUTE_DEVICE auto convert_fragment(Tensor<Engine, Layout> const& src)"):
        w.line("using From = typename Engine::value_type;")
        w.line("constexpr int N = decltype(size(src))::value;")
        w.line("Tensor dst = make_tensor<To>(src.layout());")
        w.line("auto const& in = *reinterpret_cast<cutlass::Array<From, N> const*>(src.data());")
        w.line(
            "*reinterpret_cast<cutlass::Array<To, N>*>(dst.data()) = "
            "cutlass::NumericArrayConverter<To, From, N>{}(in);"
        )
        w.line("return dst;")


def emit_normalize_rows(w: CodeWriter, lse_factor: str = "softmax_scale", declare_view: bool = True) -> None:
    """TL `Compute Divide O, rowsum`: O /= row sum, and the row LSE; a row that saw no key keeps O = 0.
    `lse_factor` turns a row max as the tile holds it into natural-log units (the scale for raw scores,
    ln 2 for a variant's log2-domain scores)."""
    if declare_view:
        w.line("Tensor acc_o_rowcol = make_tensor(acc_o.data(), tl::acc_rowcol(acc_o.layout()));")
    w.line("Tensor row_lse = make_tensor<float>(Shape<Int<kRowsPerThread>>{});")
    w.line("CUTE_UNROLL")
    with w.block("for (int r = 0; r < size<0>(acc_o_rowcol); ++r)"):
        w.line("const float sum = tl::quad_sum(row_sum(r));")
        w.line("const bool empty = sum == 0.f || sum != sum;")
        w.line("const float inv_sum = empty ? 1.f : 1.f / sum;")
        w.line(f"row_lse(r) = empty ? __int_as_float(0x7f800000) : row_max(r) * {lse_factor} + __logf(sum);")
        w.line("CUTE_UNROLL")
        w.line("for (int c = 0; c < size<1>(acc_o_rowcol); ++c) acc_o_rowcol(r, c) *= inv_sum;")


def identity_partition_o(thr_mma: str, coord_layout: str | None = None) -> str:
    """The C++ of `thr_mma`'s C partition of O's (BM, d_v) identity tensor: CuTe's `partition_C`, or with
    `coord_layout` (a traits type of what its thrfrg_C derives) the sm_90 forward's `tl::partition_C`."""
    identity = "make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDimV>>{})"
    if coord_layout is None:
        return f"{thr_mma}.partition_C({identity})"
    return f"tl::partition_C({thr_mma}, {identity}, {coord_layout}{{}})"


def emit_store_lse(
    w: CodeWriter, thr_mma: str, *, packed: bool = False, coord_layout: str | None = None
) -> None:
    """The row LSE to global memory from registers: `thr_mma` is the thread slice of the GEMM whose
    accumulator holds O (its C partition tells each thread which rows it owns; `coord_layout`: see
    `identity_partition_o`). `packed`: a packed batch's LSE, (heads, total_q) with the sequence starting
    at q_start (`runner.abi.INFERENCE_PARAMS`)."""
    layout = "(heads, total_q)" if packed else "(batch, heads, seqlen_q)"
    w.comment(f"LSE {layout}, fp32: the thread holding column 0 of a row writes it.")
    w.line(f"Tensor tOcO = {identity_partition_o(thr_mma, coord_layout)};")
    w.line("Tensor tOcO_rowcol = make_tensor(tOcO.data(), tl::acc_rowcol(tOcO.layout()));")
    with w.block("if (get<1>(tOcO_rowcol(0, 0)) == 0)"):
        if packed:
            w.line("float* lse_row = lse + static_cast<long long>(bidh) * cu_seqlens_q[batch] + q_start;")
        else:
            w.line("float* lse_row = lse + (static_cast<long long>(bidb) * heads + bidh) * seqlen_q;")
        w.line("CUTE_UNROLL")
        with w.block("for (int r = 0; r < size<0>(tOcO_rowcol); ++r)"):
            w.line("const int row = m_block * kBlockM + get<0>(tOcO_rowcol(r, 0));")
            w.line("if (row < seqlen_q) lse_row[row] = row_lse(r);")


def emit_partition_c(w: CodeWriter) -> None:
    """`partition_C`: CuTe's `ThrMMA::partition_C` on a `thrfrg_C` layout the traits write out (both
    backends: the sm_90 forward's wgmma tiles, the sm_80 forward's mma.sync tiles)."""
    w.comment("CuTe's ThrMMA::partition_C with the layout its thrfrg_C derives given as a type (the")
    w.comment("identity tensors' Traits::CoordLayoutS/O): the same slice at this thread's (ThrV, (ThrM,")
    w.comment("ThrN)), so the same index arithmetic, without the layout algebra (about 1 s of nvcc).")
    w.line("template <class ThrMma, class CTensor, class ThrFrg>")
    with w.block("CUTE_DEVICE auto partition_C(ThrMma const& thr_mma, CTensor&& ctensor, ThrFrg thrfrg)"):
        w.line("auto thr_tensor = make_tensor(static_cast<CTensor&&>(ctensor).data(), thrfrg);")
        w.line("auto const& vmnk = thr_mma.thr_vmnk_;")
        w.line("auto thr_vmn = make_coord(get<0>(vmnk), make_coord(get<1>(vmnk), get<2>(vmnk)));")
        w.line("return thr_tensor(thr_vmn, make_coord(_, cute::repeat<rank<1, 1>(ThrFrg{})>(_)));")
