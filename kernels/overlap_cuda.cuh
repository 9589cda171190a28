// The overlap rule's passes (worker/leader/overlap_merge.hpp) over device arrays: the element
// arithmetic of kernels/overlap_math.hpp, bit for bit the host's OverlapMerge. Every function
// launches on `stream` and returns without synchronising; pointers are device pointers to whole
// tables (the arrays' and x's), of which [offset, offset + n) is read and written. Launch errors
// are thrown as SystemError at the call site. CUDA-enabled code only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/overlap_math.hpp"

namespace geotrain::kernels::cuda {

// START: push[j] = x[j], x[j] = theta_g + proxy(q), on the range.
void overlap_start(const OverlapRule& rule, const OverlapArrays& arrays, float* x, float* push,
                   size_t offset, size_t n, cudaStream_t stream);
// MERGE with the new global values `global` (whole table; the range is read).
void overlap_merge(const OverlapRule& rule, const OverlapArrays& arrays, float* x,
                   const float* global, size_t offset, size_t n, cudaStream_t stream);

}  // namespace geotrain::kernels::cuda
