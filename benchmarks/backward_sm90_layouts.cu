// Host-side checks of the layout algebra the sm_90 backward (translator/backends/sm90_bwd.py) relies on,
// with its traits' types for bf16 (no GPU: CuTe layouts evaluate on the host):
//   nvcc -std=c++17 -DHD=128 -I<cutlass>/include benchmarks/backward_sm90_layouts.cu -o /tmp/l && /tmp/l
//   (HD=64 too; <cutlass> = cutlass_library/source in the nvidia-cutlass wheel)
// 1. tl::acc_to_A of Sᵀ's accumulator holds, register by register, the (key, query) that dV's RS wgmma
//    expects in its A fragment (partition_A of the same tile), and both GEMMs give a warp group the same
//    key rows. 2. tl::acc_colrow's rows are one query each, its columns one key each, and the queries a
//    lane holds depend on lane % 4 only (the row sums reduce over lanes xor 4, 8, 16). 3. dQ's tiled MMA
//    covers the (kBlockM, kHeadDim) tile once (dq_accum's fragment order). 4. The transposed shared views
//    (Qᵀ, dOᵀ, Kᵀ, dSᵀ) address the same elements as the tiles they view.
#include <cute/tensor.hpp>
#include <cstdio>
using namespace cute;
using Element = cute::bfloat16_t;
constexpr int kBlockM = 64, kBlockN = 128, kHeadDim = HD;
#if HD == 128
using AtomdKV = SM90::GMMA::MMA_64x128x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::MN>;
using AtomdQ = SM90::GMMA::MMA_64x64x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::MN>;
using AtomK = GMMA::Layout_K_SW128_Atom<Element>;
#else
using AtomdKV = SM90::GMMA::MMA_64x64x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::MN>;
using AtomdQ = SM90::GMMA::MMA_64x32x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::MN>;
using AtomK = GMMA::Layout_K_SW64_Atom<Element>;
#endif
using TiledMmaSdP = decltype(make_tiled_mma(SM90::GMMA::MMA_64x64x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>{}, Layout<Shape<_2, _1, _1>>{}));
using TiledMmadKV = decltype(make_tiled_mma(AtomdKV{}, Layout<Shape<_2, _1, _1>>{}));
using TiledMmadQ = decltype(make_tiled_mma(AtomdQ{}, Layout<Shape<_1, _2, _1>>{}));
using SmemLayoutQdO = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
using SmemLayoutK = decltype(tile_to_shape(AtomK{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
using SmemLayoutdS = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<Int<kBlockM>, Int<kBlockN>>{}));
using SmemLayoutQdOt = decltype(composition(SmemLayoutQdO{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockM>>{}, Stride<Int<kBlockM>, _1>{})));
using SmemLayoutKt = decltype(composition(SmemLayoutK{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, Stride<Int<kBlockN>, _1>{})));
using SmemLayoutdSt = decltype(composition(SmemLayoutdS{}, make_layout(Shape<Int<kBlockN>, Int<kBlockM>>{}, Stride<Int<kBlockM>, _1>{})));

template <class Layout> constexpr auto acc_to_A(Layout acc) {  // as tl::acc_to_A (sm90/helpers.py)
  auto groups = logical_divide(get<0, 2>(acc), Tile<_2>{});
  return make_layout(make_layout(get<0, 0>(acc), get<0, 1>(acc), get<0, 0>(groups)), get<1>(acc),
                     coalesce(make_layout(get<0, 1>(groups), get<2>(acc))));
}
template <class Layout> constexpr auto acc_colrow(Layout acc) {  // as tl::acc_colrow (sm90_bwd.py)
  return make_layout(make_layout(get<0, 0>(acc), get<0, 2>(acc), get<2>(acc)), make_layout(get<0, 1>(acc), get<1>(acc)));
}
template <class A, class At> int transposed_view_errors(int rows, int cols) {
  auto a = get_nonswizzle_portion(A{});
  auto at = get_nonswizzle_portion(At{});
  int bad = std::is_same_v<decltype(get_swizzle_portion(A{})), decltype(get_swizzle_portion(At{}))> ? 0 : 1;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) bad += a(r, c) != at(c, r);
  return bad;
}

int main() {
  int bad = 0;
  TiledMmaSdP sdp;
  TiledMmadKV dkv;
  TiledMmadQ dq;
  auto scores = [&](int t) { return sdp.get_thread_slice(t).partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{})); };
  for (int t = 0; t < 256; ++t) {
    auto tScS = scores(t);
    auto tA = make_tensor(tScS.data(), acc_to_A(tScS.layout()));
    auto want = dkv.get_thread_slice(t).partition_A(make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{}));
    bad += size(tA) != size(want);
    for (int i = 0; i < size(tA) && i < size(want); ++i) bad += tA(i) != want(i);
    auto tC = dkv.get_thread_slice(t).partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));
    bad += get<0>(tScS(0)) / 64 != get<0>(tC(0)) / 64;
    auto cr = make_tensor(tScS.data(), acc_colrow(tScS.layout()));
    auto cr4 = make_tensor(scores(t % 4).data(), acc_colrow(scores(t % 4).layout()));
    for (int r = 0; r < size<0>(cr); ++r) {
      bad += get<1>(cr(r, 0)) != get<1>(cr4(r, 0));
      for (int c = 0; c < size<1>(cr); ++c) bad += get<1>(cr(r, c)) != get<1>(cr(r, 0)) || get<0>(cr(r, c)) != get<0>(cr(0, c));
    }
  }
  static int cover[kBlockM * kHeadDim];
  for (int t = 0; t < 256; ++t) {
    auto c = dq.get_thread_slice(t).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    for (int i = 0; i < size(c); ++i) cover[get<0>(c(i)) * kHeadDim + get<1>(c(i))]++;
  }
  for (int i = 0; i < kBlockM * kHeadDim; ++i) bad += cover[i] != 1;
  bad += transposed_view_errors<SmemLayoutQdO, SmemLayoutQdOt>(kBlockM, kHeadDim);
  bad += transposed_view_errors<SmemLayoutK, SmemLayoutKt>(kBlockN, kHeadDim);
  bad += transposed_view_errors<SmemLayoutdS, SmemLayoutdSt>(kBlockM, kBlockN);
  printf("sm90_bwd layouts, d %d: %s (%d errors)\n", kHeadDim, bad ? "FAIL" : "ok", bad);
  return bad != 0;
}
