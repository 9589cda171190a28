// The token and position embedding on a GPU: the CUDA twin of kernels/ops/embedding.cpp.
// Contracts in kernels/gpt_cuda.cuh; shared helpers in kernels/ops/cuda_common.cuh.
#include "kernels/ops/cuda_common.cuh"

namespace geotrain::kernels::cuda {
namespace {

using namespace ops_detail;

template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                         int BT, int T_, int C) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (i >= size_t(BT) * C) return;
  const int bt = static_cast<int>(i / C), c = static_cast<int>(i % C), t = bt % T_;
  out[i] =
      from_float<T>(to_float(wte[size_t(tokens[bt]) * C + c]) + to_float(wpe[size_t(t) * C + c]));
}

template <typename T>
__global__ void embedding_backward_kernel(float* dwte, float* dwpe, const T* dout,
                                          const int32_t* tokens, int BT, int T_, int C) {
  const size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  if (i >= size_t(BT) * C) return;
  const int bt = static_cast<int>(i / C), c = static_cast<int>(i % C), t = bt % T_;
  const float d = to_float(dout[i]);
  atomicAdd(dwte + size_t(tokens[bt]) * C + c, d);
  atomicAdd(dwpe + size_t(t) * C + c, d);
}

}  // namespace

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, size_t B,
                       size_t T_, size_t C, cudaStream_t stream) {
  const size_t n = B * T_ * C;
  as_int(B * T_, "B * T");
  embedding_forward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(
      out, tokens, wte, wpe, static_cast<int>(B * T_), as_int(T_, "T"), as_int(C, "C"));
  GT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void embedding_backward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, size_t B,
                        size_t T_, size_t C, cudaStream_t stream) {
  const size_t n = B * T_ * C;
  embedding_backward_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(
      dwte, dwpe, dout, tokens, as_int(B * T_, "B * T"), as_int(T_, "T"), as_int(C, "C"));
  GT_CUDA_CHECK_LAUNCH();
}

#define GT_OPS(T)                                                                               \
  template void embedding_forward<T>(T*, const int32_t*, const T*, const T*, size_t, size_t,    \
                                     size_t, cudaStream_t);                                     \
  template void embedding_backward<T>(float*, float*, const T*, const int32_t*, size_t, size_t, \
                                      size_t, cudaStream_t);

GT_OPS(float)
GT_OPS(__nv_bfloat16)
#undef GT_OPS

}  // namespace geotrain::kernels::cuda
