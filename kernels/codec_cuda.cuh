// CUDA twins of kernels/codec_cpu.hpp: the same bodies, byte for byte, for the deterministic
// modes (and for stochastic rounding too, since the RNG is counter-based).
//
// Every function launches on `stream` and returns without synchronising; pointers are device
// pointers with the sizes given by the helpers in codec_cpu.hpp. The encoders with a residual
// run the fused error-feedback step (x = g + decay e; body = C(x); e = x - D(body)) in one
// pass: EF, scale, quantise and pack. `decay` is ErrorFeedback's beta (1: x = g + e, no
// multiply); the CPU computes the same x as beta e in scratch, then the fused encode. Launch errors
// are thrown as SystemError at the call site.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/codec_cpu.hpp"

namespace geotrain::kernels::cuda {

void fp32_encode(const float* g, float* residual, size_t n, float* out, cudaStream_t stream,
                 float decay = 1.0f);
void fp32_decode(const float* in, size_t n, float* y, bool add, cudaStream_t stream);

void fp16_encode(const float* g, float* residual, size_t n, uint16_t* out, cudaStream_t stream,
                 float decay = 1.0f);
void fp16_decode(const uint16_t* in, size_t n, float* y, bool add, cudaStream_t stream);
void bf16_encode(const float* g, float* residual, size_t n, uint16_t* out, cudaStream_t stream,
                 float decay = 1.0f);
void bf16_decode(const uint16_t* in, size_t n, float* y, bool add, cudaStream_t stream);

void int8_encode(const float* g, float* residual, size_t n, uint32_t chunk, Rounding rounding,
                 float* scales, int8_t* q, cudaStream_t stream, float decay = 1.0f);
void int8_decode(const float* scales, const int8_t* q, size_t n, uint32_t chunk, float* y, bool add,
                 cudaStream_t stream);

void int4_encode(const float* g, float* residual, size_t n, uint32_t chunk, Rounding rounding,
                 float* scales, uint8_t* packed, cudaStream_t stream, float decay = 1.0f);
void int4_decode(const float* scales, const uint8_t* packed, size_t n, uint32_t chunk, float* y,
                 bool add, cudaStream_t stream);

// fp4 (E2M1 codes, scale absmax/6): one block per chunk, like int4.
void fp4_encode(const float* g, float* residual, size_t n, uint32_t chunk, float* scales,
                uint8_t* packed, cudaStream_t stream, float decay = 1.0f);
void fp4_decode(const float* scales, const uint8_t* packed, size_t n, uint32_t chunk, float* y,
                bool add, cudaStream_t stream);

// One warp per chunk: lane j accumulates elements j, j+32, ... (the canonical lane order), a
// shuffle-xor butterfly folds the lanes, and __ballot_sync packs word k from the k-th pass.
// `scale` as in the CPU twin (mean |x| or sqrt(mean x^2)).
void onebit_encode(const float* g, float* residual, size_t n, uint32_t chunk, float* scales,
                   uint32_t* bits, cudaStream_t stream, OnebitScale scale = OnebitScale::mean,
                   float decay = 1.0f);
void onebit_decode(const float* scales, const uint32_t* bits, size_t n, uint32_t chunk, float* y,
                   bool add, cudaStream_t stream);

// d = a - b (the leader's delta, local - base: the same IEEE subtraction as the host's loop).
void subtract(const float* a, const float* b, size_t n, float* d, cudaStream_t stream);

// Number of CUDA devices visible; 0 when there is no driver or no device (never throws).
int device_count();

}  // namespace geotrain::kernels::cuda
