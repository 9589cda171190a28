// GELU (tanh approximation) on a GPU: the CUDA twin of kernels/ops/gelu.cpp.
// Contracts in kernels/gpt_cuda.cuh; shared helpers in kernels/ops/cuda_common.cuh.
#include "kernels/ops/cuda_common.cuh"

namespace geotrain::kernels::cuda {
namespace {

using namespace ops_detail;

__device__ __forceinline__ float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* x, size_t n) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = from_float<T>(gelu_tanh(to_float(x[i])));
}

template <typename T>
__global__ void gelu_backward_kernel(T* dx, const T* x, const T* dout, size_t n) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float k = 0.7978845608028654f;
  const float v = to_float(x[i]);
  const float u = k * (v + 0.044715f * v * v * v);
  const float th = tanhf(u);
  const float sech2 = 1.0f - th * th;
  const float grad = 0.5f * (1.0f + th) + 0.5f * v * sech2 * k * (1.0f + 3.0f * 0.044715f * v * v);
  dx[i] = from_float<T>(grad * to_float(dout[i]));
}

}  // namespace

template <typename T>
void gelu_forward(T* out, const T* x, size_t n, cudaStream_t stream) {
  gelu_forward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, x, n);
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void gelu_backward(T* dx, const T* x, const T* dout, size_t n, cudaStream_t stream) {
  gelu_backward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(dx, x, dout, n);
  GT_CUDA_CHECK_LAUNCH();
}

#define GT_OPS(T)                                                    \
  template void gelu_forward<T>(T*, const T*, size_t, cudaStream_t); \
  template void gelu_backward<T>(T*, const T*, const T*, size_t, cudaStream_t);

GT_OPS(float)
GT_OPS(__nv_bfloat16)
#undef GT_OPS

}  // namespace geotrain::kernels::cuda
