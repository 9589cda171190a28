// What the GPT's CUDA ops share (kernels/ops/*.cu): conversions between fp32 and the activation
// type, warp reductions, and the launchers' shape checks and grid arithmetic. Internal to the
// ops' .cu files. Must not include core/error.hpp (fmt's consteval format strings do not
// compile under nvcc).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstdint>
#include <string>

#include "core/check_cuda.hpp"
#include "core/error_types.hpp"
#include "kernels/gpt_cuda.cuh"

namespace geotrain::kernels::cuda::ops_detail {

using bf16 = __nv_bfloat16;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(kFullMask, v, off);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, off));
  return v;
}

inline void require(bool ok, const char* what, size_t value) {
  if (!ok) throw InputError(std::string("gpt kernel: ") + what + " is " + std::to_string(value));
}
inline int as_int(size_t n, const char* what) {
  require(n > 0 && n <= static_cast<size_t>(INT_MAX), what, n);
  return static_cast<int>(n);
}
inline unsigned blocks_for(size_t n, unsigned threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}
// One warp per row, 8 warps per block.
constexpr unsigned kRowThreads = 256;
inline unsigned warp_row_blocks(size_t rows) { return blocks_for(rows * 32, kRowThreads); }

}  // namespace geotrain::kernels::cuda::ops_detail
