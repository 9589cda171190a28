// Scalar arithmetic shared, line for line, by the CPU codecs and their CUDA twins. Keeping one
// definition of each rounding, conversion and reduction is what makes the packed bytes of the
// two paths identical. Everything here is a pure function usable on host and device.
//
// Floating-point contract: callers are compiled without FMA contraction (-ffp-contract=off on
// the host, --fmad=false for the codec kernels) and without flush-to-zero.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GT_HD __host__ __device__ __forceinline__
#else
#define GT_HD inline
#endif

namespace geotrain::kernels {

// Lanes of the canonical reduction: element i of a chunk accumulates into lane i % kLanes, lanes
// are summed in order of index, and then folded pairwise (16, 8, 4, 2, 1). On the GPU one warp
// owns a chunk, lane j walks elements j, j+32, ... and the fold is a shuffle-xor butterfly; since
// float addition is commutative, every lane of the butterfly holds exactly the CPU's result.
inline constexpr unsigned kLanes = 32;

// Elements per packed one-bit word; chunks are multiples of it so words never straddle chunks.
inline constexpr unsigned kBitsPerWord = 32;

GT_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

GT_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

GT_HD float abs_f(float x) { return bits_float(float_bits(x) & 0x7fffffffu); }

// |x| as an integer: for non-NaN floats the integer order is the order of |x|, and NaN sorts
// above +inf. Integer max vectorises (a float max reduction does not without -ffast-math) and
// gives the same result in any order, on any device.
GT_HD uint32_t abs_bits(float x) { return float_bits(x) & 0x7fffffffu; }
GT_HD uint32_t max_u(uint32_t a, uint32_t b) { return a > b ? a : b; }

// ---- fp16 (IEEE binary16), round to nearest even; after M. Dukhan's FP16 library. ----
GT_HD uint16_t fp16_from_float(float f) {
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = (abs_f(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = float_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = bits_float((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = float_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

GT_HD float fp16_to_float(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = 0xE0u << 23;
  const float exp_scale = 0x1.0p-112f;
  const float normalized = bits_float((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = 126u << 23;
  const float magic_bias = 0.5f;
  const float denormalized = bits_float((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t denormalized_cutoff = 1u << 27;
  const uint32_t result =
      sign | (two_w < denormalized_cutoff ? float_bits(denormalized) : float_bits(normalized));
  return bits_float(result);
}

// ---- bf16, round to nearest even; NaN stays a (quiet) NaN. ----
GT_HD uint16_t bf16_from_float(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const bool is_nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<uint16_t>(is_nan ? ((u >> 16) | 0x40u) : rounded);
}

GT_HD float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// ---- counter-based RNG for stochastic rounding ----
// A uniform in [0, 1) that depends only on (seed, nonce, index): any thread, on any device, in
// any order, draws the same number for the same element. The (seed, nonce) pair is mixed once
// into a 64-bit key (splitmix64's finaliser); per element, two rounds of murmur3's 32-bit
// finaliser over the index and the key: 32-bit multiplies, so the CPU loop vectorises.
GT_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

GT_HD uint32_t fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}

GT_HD uint64_t rounding_key(uint64_t seed, uint64_t nonce) {
  return mix64(seed ^ mix64(nonce + 0x9E3779B97F4A7C15ull));
}

GT_HD float uniform01_keyed(uint64_t key, uint64_t index) {
  uint32_t h = fmix32(static_cast<uint32_t>(index) ^ static_cast<uint32_t>(key));
  h = fmix32(h + static_cast<uint32_t>(key >> 32) + static_cast<uint32_t>(index >> 32));
  return static_cast<float>(h >> 8) * 0x1.0p-24f;  // exact: 24 bits
}

GT_HD float uniform01(uint64_t seed, uint64_t nonce, uint64_t index) {
  return uniform01_keyed(rounding_key(seed, nonce), index);
}

// ---- integer quantisation with a per-chunk absmax scale ----
// levels = 127 (int8) or 7 (int4). inv = levels/absmax and scale = absmax/levels are computed
// once per chunk; q = round(x*inv), clamped to [-levels, levels]; decoded value q*scale.
GT_HD float quant_inv(float absmax, float levels) { return absmax > 0.0f ? levels / absmax : 0.0f; }
GT_HD float quant_scale(float absmax, float levels) { return absmax / levels; }

GT_HD float round_even(float v) {
#if defined(__CUDA_ARCH__)
  return rintf(v);
#else
  return __builtin_rintf(v);
#endif
}

// floor through rint: exact for every float, and it vectorises (GCC will not vectorise floorf
// without -fno-trapping-math).
GT_HD float floor_exact(float v) {
  const float r = round_even(v);
  return r > v ? r - 1.0f : r;
}

GT_HD int quantize(float x, float inv, float levels, bool stochastic, float u) {
  const float v = x * inv;
  float r = stochastic ? floor_exact(v + u) : round_even(v);
  r = r > levels ? levels : r;
  r = r < -levels ? -levels : r;
  r = r == r ? r : 0.0f;  // NaN quantises to 0 rather than to an undefined integer
  return static_cast<int>(r);
}

// ---- fp4: OCP MX E2M1 (1 sign, 2 exponent, 1 mantissa bit) with a per-chunk fp32 scale ----
// Codes 0..7 are the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 (the E2M1 encoding, in order); bit 3 is
// the sign. scale = absmax/6, inv = 6/absmax; v = |x| * inv is rounded to the nearest magnitude,
// a tie going to the even code (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4,
// 5 -> 4), as IEEE rounds ties to an even mantissa. The sign bit is set when x < 0, so -0 and NaN
// give code 0 (+0). Comparisons only: the CPU loop vectorises and the GPU computes the same code.
inline constexpr float kFp4Max = 6.0f;

GT_HD unsigned fp4_code(float x, float inv) {
  const float v = abs_f(x) * inv;
  const unsigned m = unsigned(v > 0.25f) + unsigned(v >= 0.75f) + unsigned(v > 1.25f) +
                     unsigned(v >= 1.75f) + unsigned(v > 2.5f) + unsigned(v >= 3.5f) +
                     unsigned(v > 5.0f);
  return m | (x < 0.0f ? 8u : 0u);
}

// Magnitude of code m (0..7) as a multiple of the scale: exact in float.
GT_HD float fp4_magnitude(unsigned m) {
  // 0, 0.5, 1, 1.5 are m/2; 2, 3, 4, 6 are (2 + mantissa) * 2^(e-2) with e = m >> 1.
  return m < 4 ? float(m) * 0.5f : float((2u + (m & 1u)) << ((m >> 1) - 2u));
}

GT_HD float fp4_value(unsigned code, float scale) {
  const float v = scale * fp4_magnitude(code & 7u);
  return (code & 8u) ? -v : v;
}

// ---- topk with quantised values (qtopk): sign + magnitude level of the chunk's absmax ----
// bits b in {2, 4, 8}: the top bit is the sign (x < 0), the low b-1 bits a level m in
// [0, L-1], L = 2^(b-1), decoded as scale * (m+1)/L with scale = the chunk's absmax (the largest
// selected |x|). The selected entries are the chunk's largest, so there is no zero level:
// m = clamp(round(|x| * L/absmax) - 1, 0, L-1), round half to even. (m+1)/L is exact, so decoding
// rounds once, in the product.
GT_HD unsigned qtopk_code(float x, float inv, float levels) {
  const int r = quantize(abs_f(x), inv, levels, false, 0.0f);  // in [0, L]; NaN gives 0
  const unsigned m = r > 0 ? unsigned(r - 1) : 0u;
  return m | (x < 0.0f ? unsigned(levels) : 0u);
}

GT_HD float qtopk_value(unsigned code, float scale, float levels) {
  const unsigned sign = unsigned(levels);
  const float v = scale * (float((code & (sign - 1u)) + 1u) / levels);
  return (code & sign) ? -v : v;
}

// ---- one-bit ----
// Bit set <=> x < 0 (so +0, -0 and NaN decode to +scale). Decoded value: bit ? -scale : scale.
GT_HD float onebit_value(uint32_t word, unsigned bit, float scale) {
  return ((word >> bit) & 1u) ? -scale : scale;
}

}  // namespace geotrain::kernels
