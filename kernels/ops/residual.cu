// The residual add on a GPU (the CUDA twin of kernels/ops/residual.cpp), and the cast of fp32
// master weights to the activation type (no CPU twin: the CPU trains in fp32 only).
// Contracts in kernels/gpt_cuda.cuh; shared helpers in kernels/ops/cuda_common.cuh.
#include "kernels/ops/cuda_common.cuh"

namespace geotrain::kernels::cuda {
namespace {

using namespace ops_detail;

template <typename T>
__global__ void residual_kernel(T* out, const T* a, const T* b, size_t n) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

template <typename T>
__global__ void cast_kernel(T* out, const float* in, size_t n) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = from_float<T>(in[i]);
}

}  // namespace

template <typename T>
void residual_forward(T* out, const T* a, const T* b, size_t n, cudaStream_t stream) {
  residual_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, a, b, n);
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void cast_from_float(T* out, const float* in, size_t n, cudaStream_t stream) {
  cast_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(out, in, n);
  GT_CUDA_CHECK_LAUNCH();
}

#define GT_OPS(T)                                                                  \
  template void residual_forward<T>(T*, const T*, const T*, size_t, cudaStream_t); \
  template void cast_from_float<T>(T*, const float*, size_t, cudaStream_t);

GT_OPS(float)
GT_OPS(__nv_bfloat16)
#undef GT_OPS

}  // namespace geotrain::kernels::cuda
