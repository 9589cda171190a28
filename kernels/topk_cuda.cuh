// CUDA twin of compression's topk codec body: exactly the k largest |x| (ties: lower index
// first), values in index order then LEB128 varints of the first index and the gaps.
//
// Selection as on the CPU: a hashed sample (the same positions) estimates a threshold, one
// pass compacts the candidates above it (flags, scan, scatter), and a stable radix sort of the
// candidates by |x| descending picks k; the k indices are sorted ascending and packed. The
// result equals the CPU's bytes for any input, because both select the first k of one total
// order (|x| descending, index ascending) and the candidates always contain them.
//
// Blocking: synchronises `stream` (the body length depends on the data). Allocates its device
// temporaries per call. n must be below 2^32.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace geotrain::kernels::cuda {

// Writes the body into `body` (device, capacity at least 14 * k bytes) and returns its size.
// With a residual: x = g + residual first, and residual[i] = 0 at the selected i.
size_t topk_encode(const float* g, float* residual, size_t n, uint64_t k, uint32_t sample,
                   std::byte* body, cudaStream_t stream);

// y[indices[j]] (+)= values[j]; without add, y is zeroed first. Indices were validated by the
// host (compression/topk.cpp parses and checks them before anything is written).
void topk_decode(const float* values, const uint32_t* indices, uint64_t k, size_t n, float* y,
                 bool add, cudaStream_t stream);

}  // namespace geotrain::kernels::cuda
