// CPU codec kernels: quantise, scale and pack fp32 data into codec bodies, and back.
//
// Each encoder takes the input g and an optional residual (error feedback). With a residual it
// runs the fused error-feedback step in one pass, in this order:
//     x = g + residual;  body = C(x);  residual = x - D(body)
// (compression/error_feedback.hpp holds the reference order; tests hold the two equal). Without
// one (residual == nullptr) it encodes g as is. Decoders write (add == false) or accumulate
// (add == true) into y. Bodies are exact byte layouts shared with the CUDA twins in
// codec_cuda.cuh, which produce identical bytes for the deterministic modes.
//
// Single-threaded, no allocation, no error checks: compression/ validates everything first.
// Pointers borrow; scales/q/bits must hold the sizes given by the *_size helpers below.
#pragma once

#include <cstddef>
#include <cstdint>

namespace geotrain::kernels {

struct Rounding {
  bool stochastic = false;
  uint64_t seed = 0;
  uint64_t nonce = 0;  // advanced by the codec on every encode
};

// How onebit picks a chunk's scale s (every element decodes to +-s). The decoder reads s from
// the body either way, so the choice is the encoder's alone.
//   mean: s = mean |x| (canonical lane sum of |x| / count): the s that minimises the squared
//         error for the sign pattern.
//   rms:  s = sqrt(mean x^2) (canonical lane sum of x*x / count, then a correctly rounded sqrt)
//         = ||x||_2 / ||sign x||_2: the decoded chunk keeps the chunk's L2 norm (1-bit Adam).
//         x*x overflows to inf for |x| above about 1.8e19 (mean's sum overflows near 3e35).
enum class OnebitScale : uint8_t { mean, rms };

inline size_t chunk_count(size_t n, uint32_t chunk) { return (n + chunk - 1) / chunk; }
inline size_t onebit_word_count(size_t n) { return (n + 31) / 32; }
inline size_t int4_byte_count(size_t n) { return (n + 1) / 2; }

namespace cpu {

// fp32 passthrough; with a residual, x = g + residual is sent and the residual becomes 0.
void fp32_encode(const float* g, float* residual, size_t n, float* out);
void fp32_decode(const float* in, size_t n, float* y, bool add);

// fp16 / bf16: (n) uint16 words, round to nearest even.
void fp16_encode(const float* g, float* residual, size_t n, uint16_t* out);
void fp16_decode(const uint16_t* in, size_t n, float* y, bool add);
void bf16_encode(const float* g, float* residual, size_t n, uint16_t* out);
void bf16_decode(const uint16_t* in, size_t n, float* y, bool add);

// int8 and int4 take the chunk's quantisation step from its absmax (step == 0: scale =
// absmax/levels, nothing clips) or from its RMS (step > 0: scale = step * sqrt(mean x^2), the
// canonical lane sum as onebit's rms; values beyond +-levels steps clip to +-levels). A step of
// about 2 RMS sends most elements as 0 and +-1, which an entropy stage (zstd) packs into 1-1.5
// bits: an entropy-coded scalar quantiser. The body's layout is the same either way; the CUDA twins
// have step == 0 only.
//
// int8: scales (chunk_count) fp32 = absmax/127 (or the step), q (n) int8.
void int8_encode(const float* g, float* residual, size_t n, uint32_t chunk, Rounding rounding,
                 float* scales, int8_t* q, float step = 0.0f);
void int8_decode(const float* scales, const int8_t* q, size_t n, uint32_t chunk, float* y,
                 bool add);

// int4: scales (chunk_count) fp32 = absmax/7 (or the step), packed (int4_byte_count): element 2i
// in the low nibble of byte i, 2i+1 in the high nibble, two's complement in [-7, 7].
void int4_encode(const float* g, float* residual, size_t n, uint32_t chunk, Rounding rounding,
                 float* scales, uint8_t* packed, float step = 0.0f);
void int4_decode(const float* scales, const uint8_t* packed, size_t n, uint32_t chunk, float* y,
                 bool add);

// fp4: scales (chunk_count) fp32 = absmax/6, packed (int4_byte_count) E2M1 codes
// (codec_math.hpp): element 2i in the low nibble of byte i, 2i+1 in the high nibble.
void fp4_encode(const float* g, float* residual, size_t n, uint32_t chunk, float* scales,
                uint8_t* packed);
void fp4_decode(const float* scales, const uint8_t* packed, size_t n, uint32_t chunk, float* y,
                bool add);

// onebit: scales (chunk_count) fp32 as chosen by `scale` (the CUDA twin's signature, plus
// `scale`), bits (onebit_word_count): bit j of word w is element 32w+j, set when x < 0.
// chunk must be a multiple of 32.
void onebit_encode(const float* g, float* residual, size_t n, uint32_t chunk, float* scales,
                   uint32_t* bits, OnebitScale scale = OnebitScale::mean);
void onebit_decode(const float* scales, const uint32_t* bits, size_t n, uint32_t chunk, float* y,
                   bool add);

}  // namespace cpu
}  // namespace geotrain::kernels
