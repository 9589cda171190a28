// CUDA twins of worker/training/optimizer.cpp's steps; contracts in optim_cuda.cuh. Must not
// include core/error.hpp (nvcc).
#include <algorithm>
#include <cmath>

#include "core/check_cuda.hpp"
#include "kernels/optim_cuda.cuh"

namespace geotrain::kernels::cuda {
namespace {

constexpr unsigned kThreads = 256;
unsigned grid_for(size_t n) {
  return static_cast<unsigned>(std::min<size_t>((n + kThreads - 1) / kThreads, 132 * 16));
}

__global__ void adamw_kernel(float* p, float* m, float* v, const float* grad, const uint8_t* mask,
                             size_t n, AdamWStep s, __nv_bfloat16* p_copy) {
  const float decay = 1.0f - s.lr * s.weight_decay, step_size = s.lr / s.bias_correction1;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const float g = grad[i] * s.grad_scale;
    float pi = p[i] * (mask == nullptr || mask[i] ? decay : 1.0f);
    const float mi = s.beta1 * m[i] + (1.0f - s.beta1) * g;
    const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * g * g;
    pi -= step_size * mi / (sqrtf(vi) / s.bias_correction2_sqrt + s.eps);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
    if (p_copy != nullptr) p_copy[i] = __float2bfloat16_rn(pi);
  }
}

__global__ void sgd_kernel(float* p, float* m, const float* grad, const uint8_t* mask, size_t n,
                           SgdStep s, __nv_bfloat16* p_copy) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const float wd = mask == nullptr || mask[i] ? s.weight_decay : 0.0f;
    float g = grad[i] * s.grad_scale + wd * p[i];
    if (s.momentum > 0) {
      const float mi = s.first ? g : s.momentum * m[i] + g;
      m[i] = mi;
      g = s.nesterov ? g + s.momentum * mi : mi;
    }
    const float pi = p[i] - s.lr * g;
    p[i] = pi;
    if (p_copy != nullptr) p_copy[i] = __float2bfloat16_rn(pi);
  }
}

__global__ void sum_of_squares_kernel(double* out, const float* x, size_t n) {
  __shared__ float partial[kThreads / 32];
  float s = 0.0f;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    s += x[i] * x[i];
  for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0;
    for (unsigned w = 0; w < kThreads / 32; ++w) t += partial[w];
    atomicAdd(out, t);
  }
}

}  // namespace

void adamw_step(float* p, float* m, float* v, const float* grad, const uint8_t* decay_mask,
                size_t n, const AdamWStep& s, __nv_bfloat16* p_copy, cudaStream_t stream) {
  if (n == 0) return;
  adamw_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, m, v, grad, decay_mask, n, s, p_copy);
  GT_CUDA_CHECK_LAUNCH();
}

void sgd_step(float* p, float* m, const float* grad, const uint8_t* decay_mask, size_t n,
              const SgdStep& s, __nv_bfloat16* p_copy, cudaStream_t stream) {
  if (n == 0) return;
  sgd_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, m, grad, decay_mask, n, s, p_copy);
  GT_CUDA_CHECK_LAUNCH();
}

void sum_of_squares(double* out, const float* x, size_t n, cudaStream_t stream) {
  GT_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(double), stream));
  if (n == 0) return;
  sum_of_squares_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, x, n);
  GT_CUDA_CHECK_LAUNCH();
}

}  // namespace geotrain::kernels::cuda
