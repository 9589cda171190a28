// exp and tanh for the ops' inner loops: plain float arithmetic that GCC vectorises (glibc's expf
// and tanhf are scalar calls without -ffast-math), so softmax and GELU cost a few cycles per
// element instead of tens.
//
// vexp: Cephes' expf (range reduction by ln 2 in two parts, degree-6 polynomial, scale by 2^n
// built in the exponent bits); relative error below 2e-7 over [-87, 88]. Inputs are clamped to
// that range, so vexp never returns inf or NaN for finite input: exp(-inf) and exp(-1000) give
// ~1e-38, not 0 (callers that mask, like causal softmax, write their zeros themselves).
// vtanh: 1 - 2 / (1 + exp(2x)); absolute error below 3e-7, exactly +-1 far out, odd up to
// rounding. Header-only, pure functions, thread-safe.
#pragma once

#include <bit>
#include <cstdint>

namespace geotrain::kernels::cpu {

inline float vexp(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  // n = round(x / ln 2) by the 1.5 * 2^23 trick: the sum's low mantissa bits hold n.
  const float shifted = x * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  float r = x - n * 0.693359375f;  // ln 2 = C1 - C2, C1 exact
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;  // exp(r), |r| <= ln2 / 2
  const uint32_t bits = (std::bit_cast<uint32_t>(shifted) - 0x4B400000u + 127u) << 23;
  return e * std::bit_cast<float>(bits);  // * 2^n
}

inline float vtanh(float x) { return 1.0f - 2.0f / (1.0f + vexp(2.0f * x)); }

}  // namespace geotrain::kernels::cpu
