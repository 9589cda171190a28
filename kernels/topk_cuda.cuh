// CUDA twin of compression's topk codec body: exactly the k largest |x| (ties: lower index
// first), values in index order then LEB128 varints of the first index and the gaps.
//
// Selection as on the CPU: a hashed sample (the same positions, sorted on the device) sets a
// threshold; one pass over x marks the candidates above it (a bit per element, a count per tile
// of 4096), and a pass over the bits writes their indices in order into a slot array of a
// capacity the sample predicts; a radix select over the candidates' keys (four 8-bit digit
// histograms) finds T, the k-th largest |x|, and an order-keeping pass keeps every candidate
// above T and the first of those equal to T, so the k indices come out ascending without a
// sort. The result equals the CPU's bytes for any input, because both select the first k of
// one total order (|x| descending, index ascending) and the candidates always contain them;
// when the sample's threshold admits fewer than k or more than the capacity, the selection
// runs again over every entry.
//
// Blocking: synchronises `stream` once (the body length depends on the data; twice in the rare
// second selection). Device temporaries are grow-only buffers kept per host thread, so repeated
// encodes allocate nothing. n must be below 2^31 (CUB counts are int).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace geotrain::kernels::cuda {

// Writes the body into `body` (device, capacity at least 14 * k bytes) and returns its size.
// With a residual: x = g + decay residual first (decay 1: no multiply), and residual[i] = 0 at
// the selected i.
size_t topk_encode(const float* g, float* residual, size_t n, uint64_t k, uint32_t sample,
                   std::byte* body, cudaStream_t stream, float decay = 1.0f);

// y[indices[j]] (+)= values[j]; without add, y is zeroed first. Indices were validated by the
// host (compression/topk.cpp parses and checks them before anything is written).
void topk_decode(const float* values, const uint32_t* indices, uint64_t k, size_t n, float* y,
                 bool add, cudaStream_t stream);

}  // namespace geotrain::kernels::cuda
