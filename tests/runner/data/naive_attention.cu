// A small hand-written attention kernel that follows the ABI of runner/abi.py (ATTENTION_PARAMS).
// One thread per query row, scalar fp32 math with an online softmax: slow, but simple enough to be
// obviously right, so it tests the runner (compile, launch, strides, masks, GQA, LSE, verification)
// independently of the translator. The TL_* macros below are the knobs the tests substitute.
#include <cute/tensor.hpp>

#define TL_ELEMENT cute::half_t
#define TL_HEAD_DIM_QK 64
#define TL_HEAD_DIM_V 64
#define TL_MASK 0  // 0: none, 1: causal (bottom-right), 2: window(left, right)
#define TL_BLOCK_M 128

using Element = TL_ELEMENT;
#define kInf (__int_as_float(0x7f800000))  // +inf; NVRTC has no <cmath> INFINITY

extern "C" __global__ void __launch_bounds__(TL_BLOCK_M) naive_attention(
    const void* q_ptr, const void* k_ptr, const void* v_ptr, void* o_ptr, float* lse_ptr,
    int batch, int seqlen_q, int seqlen_k, int heads, int heads_kv,
    long long q_batch_stride, long long q_row_stride, long long q_head_stride,
    long long k_batch_stride, long long k_row_stride, long long k_head_stride,
    long long v_batch_stride, long long v_row_stride, long long v_head_stride,
    long long o_batch_stride, long long o_row_stride, long long o_head_stride,
    float softmax_scale, int window_left, int window_right) {
  const int row = blockIdx.x * TL_BLOCK_M + threadIdx.x;
  const int b = blockIdx.y;
  const int h = blockIdx.z;
  if (row >= seqlen_q) return;
  const int h_kv = h / (heads / heads_kv);

  // (batch, seqlen, heads, dim) views with runtime strides on the first three modes.
  using namespace cute;
  Tensor mQ = make_tensor(make_gmem_ptr(static_cast<const Element*>(q_ptr)),
                          make_shape(batch, seqlen_q, heads, Int<TL_HEAD_DIM_QK>{}),
                          make_stride(q_batch_stride, q_row_stride, q_head_stride, Int<1>{}));
  Tensor mK = make_tensor(make_gmem_ptr(static_cast<const Element*>(k_ptr)),
                          make_shape(batch, seqlen_k, heads_kv, Int<TL_HEAD_DIM_QK>{}),
                          make_stride(k_batch_stride, k_row_stride, k_head_stride, Int<1>{}));
  Tensor mV = make_tensor(make_gmem_ptr(static_cast<const Element*>(v_ptr)),
                          make_shape(batch, seqlen_k, heads_kv, Int<TL_HEAD_DIM_V>{}),
                          make_stride(v_batch_stride, v_row_stride, v_head_stride, Int<1>{}));
  Tensor mO = make_tensor(make_gmem_ptr(static_cast<Element*>(o_ptr)),
                          make_shape(batch, seqlen_q, heads, Int<TL_HEAD_DIM_V>{}),
                          make_stride(o_batch_stride, o_row_stride, o_head_stride, Int<1>{}));

  float q[TL_HEAD_DIM_QK];
  for (int d = 0; d < TL_HEAD_DIM_QK; ++d) q[d] = static_cast<float>(mQ(b, row, h, d));

  // Keys this row may see; causal and window masks align to the bottom-right corner (FlashAttention 2).
  int lo = 0, hi = seqlen_k - 1;
#if TL_MASK != 0
  const int diag = row + seqlen_k - seqlen_q;
#endif
#if TL_MASK == 1
  hi = min(hi, diag);
#elif TL_MASK == 2
  if (window_left >= 0) lo = max(lo, diag - window_left);
  if (window_right >= 0) hi = min(hi, diag + window_right);
#endif

  const float scale_log2 = softmax_scale * 1.4426950408889634f;  // exp(x) == exp2(x * log2 e)
  float acc[TL_HEAD_DIM_V];
  for (int d = 0; d < TL_HEAD_DIM_V; ++d) acc[d] = 0.f;
  float row_max = -kInf, row_sum = 0.f;
  for (int j = lo; j <= hi; ++j) {
    float s = 0.f;
    for (int d = 0; d < TL_HEAD_DIM_QK; ++d) s += q[d] * static_cast<float>(mK(b, j, h_kv, d));
    s *= scale_log2;
    const float new_max = fmaxf(row_max, s);
    const float correction = exp2f(row_max - new_max);
    const float p = exp2f(s - new_max);
    row_sum = row_sum * correction + p;
    for (int d = 0; d < TL_HEAD_DIM_V; ++d)
      acc[d] = acc[d] * correction + p * static_cast<float>(mV(b, j, h_kv, d));
    row_max = new_max;
  }
  // A row that sees no key: O = 0 and LSE = +inf, as FlashAttention 2 writes it.
  const float inv = row_sum > 0.f ? 1.f / row_sum : 0.f;
  for (int d = 0; d < TL_HEAD_DIM_V; ++d) mO(b, row, h, d) = static_cast<Element>(acc[d] * inv);
  lse_ptr[(static_cast<long long>(b) * heads + h) * seqlen_q + row] =
      row_sum > 0.f ? (row_max + log2f(row_sum)) * 0.6931471805599453f : kInf;
}
