// The overlap rule's kernels. Built with --fmad=false (kernels/CMakeLists.txt), as the codec
// kernels are, so that the shared arithmetic of overlap_math.hpp rounds as the host's does.
#include "core/check_cuda.hpp"
#include "kernels/overlap_cuda.cuh"

namespace geotrain::kernels::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? (blocks == 0 ? 1 : blocks) : 65535 * 16);
}

__global__ void start_kernel(OverlapRule rule, OverlapArrays arrays, float* __restrict__ x,
                             float* __restrict__ push, size_t offset, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t j = offset + i;
    overlap_start_at(rule, arrays, j, x[j], push[j]);
  }
}

__global__ void merge_kernel(OverlapRule rule, OverlapArrays arrays, float* __restrict__ x,
                             const float* __restrict__ global, size_t offset, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t j = offset + i;
    overlap_merge_at(rule, arrays, j, x[j], global[j]);
  }
}

}  // namespace

void overlap_start(const OverlapRule& rule, const OverlapArrays& arrays, float* x, float* push,
                   size_t offset, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  start_kernel<<<blocks_for(n), kThreads, 0, stream>>>(rule, arrays, x, push, offset, n);
  GT_CUDA_CHECK(cudaGetLastError());
}

void overlap_merge(const OverlapRule& rule, const OverlapArrays& arrays, float* x,
                   const float* global, size_t offset, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  merge_kernel<<<blocks_for(n), kThreads, 0, stream>>>(rule, arrays, x, global, offset, n);
  GT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace geotrain::kernels::cuda
