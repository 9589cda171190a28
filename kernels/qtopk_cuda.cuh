// CUDA twins of the qtopk kernels in qtopk.hpp: the same scales, values, indices and residual,
// byte for byte and bit for bit.
//
// Encode: one block per chunk (grid-stride over chunks). The block computes x = g + e (kept in
// e), the chunk's absmax, then the k_c-th largest |x| by a radix select over abs_bits (four
// 8-bit digit histograms in shared memory), which gives a threshold key T and how many entries
// equal to T to take; a block scan in index order then keeps every key > T and the first of
// those == T, which is the CPU's "larger |x|, then lower index" selection. The kept indices go to
// a scratch slot array; each output byte is then written by one thread from the values it holds
// (kernels::stream_byte), and finally the residual of the kept entries becomes x - decoded.
//
// Launches on `stream` and returns without synchronising (the body size depends only on the
// layout). Scratch is allocated and freed stream-ordered (cudaMallocAsync). Pointers are device
// pointers with the sections of qtopk.hpp. Launch errors throw SystemError.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/qtopk.hpp"

namespace geotrain::kernels::cuda {

// With a residual, x = g + decay residual (decay 1: no multiply), as ErrorFeedback forms it.
void qtopk_encode(const float* g, float* residual, const QtopkLayout& layout, float* scales,
                  uint8_t* values, uint8_t* indices, cudaStream_t stream, float decay = 1.0f);

// y = D(body) (add: y += D(body)), for a body the host has validated (indices in range and
// strictly increasing within each chunk, so no two threads write one element).
void qtopk_decode(const QtopkLayout& layout, const float* scales, const uint8_t* values,
                  const uint8_t* indices, float* y, bool add, cudaStream_t stream);

}  // namespace geotrain::kernels::cuda
