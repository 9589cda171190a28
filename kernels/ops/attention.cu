// Attention's non-GEMM parts on a GPU: the head permutes and the causal softmax, the CUDA twins
// of kernels/ops/attention.cpp (the batched GEMMs run through cuBLAS in models/gpt_cuda.cpp).
// Contracts in kernels/gpt_cuda.cuh; shared helpers in kernels/ops/cuda_common.cuh.
#include "kernels/ops/cuda_common.cuh"

namespace geotrain::kernels::cuda {
namespace {

using namespace ops_detail;

template <typename T>
__global__ void permute_kernel(T* q, T* k, T* v, const T* qkv, int B, int T_, int NH, int hs) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;  // over (B, NH, T, hs)
  const size_t n = size_t(B) * NH * T_ * hs;
  if (i >= n) return;
  const int d = i % hs;
  const int t = (i / hs) % T_;
  const int h = (i / (size_t(hs) * T_)) % NH;
  const int b = static_cast<int>(i / (size_t(hs) * T_ * NH));
  const int C = NH * hs;
  const size_t src = (size_t(b) * T_ + t) * 3 * C + h * hs + d;
  q[i] = qkv[src];
  k[i] = qkv[src + C];
  v[i] = qkv[src + 2 * C];
}

template <typename T>
__global__ void permute_backward_kernel(T* dqkv, const T* dq, const T* dk, const T* dv, int B,
                                        int T_, int NH, int hs) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  const size_t n = size_t(B) * NH * T_ * hs;
  if (i >= n) return;
  const int d = i % hs;
  const int t = (i / hs) % T_;
  const int h = (i / (size_t(hs) * T_)) % NH;
  const int b = static_cast<int>(i / (size_t(hs) * T_ * NH));
  const int C = NH * hs;
  const size_t dst = (size_t(b) * T_ + t) * 3 * C + h * hs + d;
  dqkv[dst] = dq[i];
  dqkv[dst + C] = dk[i];
  dqkv[dst + 2 * C] = dv[i];
}

template <typename T>
__global__ void unpermute_kernel(T* out, const T* y, int B, int T_, int NH, int hs, bool backward) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;  // over y's (B, NH, T, hs)
  const size_t n = size_t(B) * NH * T_ * hs;
  if (i >= n) return;
  const int d = i % hs;
  const int t = (i / hs) % T_;
  const int h = (i / (size_t(hs) * T_)) % NH;
  const int b = static_cast<int>(i / (size_t(hs) * T_ * NH));
  const size_t o = ((size_t(b) * T_ + t) * NH + h) * hs + d;
  if (backward)
    out[i] = y[o];  // out = dy (B, NH, T, hs), y = dout (B, T, C)
  else
    out[o] = y[i];
}

// One warp per row of one (b, h)'s (T, T) scores; row t reads s in [0, t].
template <typename T>
__global__ void causal_softmax_kernel(T* att, const float* scores, float scale, int rows, int T_) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int t = row % T_;
  const float* s = scores + size_t(row) * T_;
  T* a = att + size_t(row) * T_;
  float m = -FLT_MAX;
  for (int j = lane; j <= t; j += 32) m = fmaxf(m, s[j] * scale);
  m = warp_max(m);
  float sum = 0.0f;
  for (int j = lane; j <= t; j += 32) sum += __expf(s[j] * scale - m);
  sum = warp_sum(sum);
  const float inv = 1.0f / sum;
  for (int j = lane; j < T_; j += 32)
    a[j] = from_float<T>(j <= t ? __expf(s[j] * scale - m) * inv : 0.0f);
}

template <typename T>
__global__ void causal_softmax_backward_kernel(T* dscores, const float* datt, const T* att,
                                               float scale, int rows, int T_) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int t = row % T_;
  const float* d = datt + size_t(row) * T_;
  const T* a = att + size_t(row) * T_;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += 32) dot += to_float(a[j]) * d[j];
  dot = warp_sum(dot);
  T* o = dscores + size_t(row) * T_;
  for (int j = lane; j < T_; j += 32)
    o[j] = from_float<T>(j <= t ? scale * to_float(a[j]) * (d[j] - dot) : 0.0f);
}

}  // namespace

template <typename T>
void attention_permute(T* q, T* k, T* v, const T* qkv, size_t B, size_t T_, size_t NH, size_t hs,
                       cudaStream_t stream) {
  const size_t n = B * NH * T_ * hs;
  permute_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(
      q, k, v, qkv, as_int(B, "B"), as_int(T_, "T"), as_int(NH, "NH"), as_int(hs, "head size"));
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void attention_permute_backward(T* dqkv, const T* dq, const T* dk, const T* dv, size_t B, size_t T_,
                                size_t NH, size_t hs, cudaStream_t stream) {
  const size_t n = B * NH * T_ * hs;
  permute_backward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(
      dqkv, dq, dk, dv, as_int(B, "B"), as_int(T_, "T"), as_int(NH, "NH"), as_int(hs, "head size"));
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void attention_unpermute(T* out, const T* y, size_t B, size_t T_, size_t NH, size_t hs,
                         cudaStream_t stream) {
  const size_t n = B * NH * T_ * hs;
  unpermute_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(
      out, y, as_int(B, "B"), as_int(T_, "T"), as_int(NH, "NH"), as_int(hs, "head size"), false);
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void attention_unpermute_backward(T* dy, const T* dout, size_t B, size_t T_, size_t NH, size_t hs,
                                  cudaStream_t stream) {
  const size_t n = B * NH * T_ * hs;
  unpermute_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(
      dy, dout, as_int(B, "B"), as_int(T_, "T"), as_int(NH, "NH"), as_int(hs, "head size"), true);
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void causal_softmax(T* att, const float* scores, float scale, size_t rows, size_t T_,
                    cudaStream_t stream) {
  causal_softmax_kernel<<<warp_row_blocks(rows), kRowThreads, 0, stream>>>(
      att, scores, scale, as_int(rows, "rows"), as_int(T_, "T"));
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void causal_softmax_backward(T* dscores, const float* datt, const T* att, float scale, size_t rows,
                             size_t T_, cudaStream_t stream) {
  causal_softmax_backward_kernel<<<warp_row_blocks(rows), kRowThreads, 0, stream>>>(
      dscores, datt, att, scale, as_int(rows, "rows"), as_int(T_, "T"));
  GT_CUDA_CHECK_LAUNCH();
}

#define GT_OPS(T)                                                                               \
  template void attention_permute<T>(T*, T*, T*, const T*, size_t, size_t, size_t, size_t,      \
                                     cudaStream_t);                                             \
  template void attention_permute_backward<T>(T*, const T*, const T*, const T*, size_t, size_t, \
                                              size_t, size_t, cudaStream_t);                    \
  template void attention_unpermute<T>(T*, const T*, size_t, size_t, size_t, size_t,            \
                                       cudaStream_t);                                           \
  template void attention_unpermute_backward<T>(T*, const T*, size_t, size_t, size_t, size_t,   \
                                                cudaStream_t);                                  \
  template void causal_softmax<T>(T*, const float*, float, size_t, size_t, cudaStream_t);       \
  template void causal_softmax_backward<T>(T*, const float*, const T*, float, size_t, size_t,   \
                                           cudaStream_t);

GT_OPS(float)
GT_OPS(__nv_bfloat16)
#undef GT_OPS

}  // namespace geotrain::kernels::cuda
