#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/codec_cpu.hpp"
#include "kernels/codec_math.hpp"

using namespace geotrain::kernels;

TEST_CASE("fp16 conversion rounds to nearest even and round-trips every half value") {
  CHECK(fp16_from_float(1.0f) == 0x3C00);
  CHECK(fp16_from_float(-2.0f) == 0xC000);
  CHECK(fp16_from_float(65504.0f) == 0x7BFF);
  CHECK(fp16_from_float(65520.0f) == 0x7C00);               // rounds up to +inf
  CHECK(fp16_from_float(1.0f + 0x1.0p-11f) == 0x3C00);      // tie: to even (down)
  CHECK(fp16_from_float(1.0f + 3 * 0x1.0p-11f) == 0x3C02);  // tie: to even (up)
  CHECK(fp16_from_float(0x1.0p-24f) == 0x0001);             // smallest subnormal
  CHECK((fp16_from_float(std::numeric_limits<float>::quiet_NaN()) & 0x7C00) == 0x7C00);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x03FF)) continue;  // NaN payloads are canonicalised
    const float f = fp16_to_float(static_cast<uint16_t>(h));
    REQUIRE(fp16_from_float(f) == h);
  }
}

TEST_CASE("bf16 conversion rounds to nearest even and keeps NaN a NaN") {
  CHECK(bf16_from_float(1.0f) == 0x3F80);
  CHECK(bf16_from_float(bits_float(0x3F808000u)) == 0x3F80);  // tie, even stays
  CHECK(bf16_from_float(bits_float(0x3F818000u)) == 0x3F82);  // tie, odd rounds up
  CHECK(bf16_from_float(bits_float(0x3F808001u)) == 0x3F81);  // above the tie
  CHECK(std::isnan(bf16_to_float(bf16_from_float(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(bf16_to_float(0x3F80) == 1.0f);
}

TEST_CASE("the counter-based RNG depends only on (seed, nonce, index) and is uniform") {
  CHECK(uniform01(1, 2, 3) == uniform01(1, 2, 3));
  CHECK(uniform01(1, 2, 3) != uniform01(1, 2, 4));
  CHECK(uniform01(1, 2, 3) != uniform01(1, 3, 3));
  double sum = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const float u = uniform01(7, 0, i);
    REQUIRE(u >= 0.0f);
    REQUIRE(u < 1.0f);
    sum += u;
  }
  CHECK(sum / n == doctest::Approx(0.5).epsilon(0.01));
}

TEST_CASE("quantize rounds half to even, clamps, and maps NaN to zero") {
  CHECK(quantize(2.5f, 1.0f, 127.0f, false, 0.0f) == 2);
  CHECK(quantize(3.5f, 1.0f, 127.0f, false, 0.0f) == 4);
  CHECK(quantize(-300.0f, 1.0f, 127.0f, false, 0.0f) == -127);
  CHECK(quantize(9.0f, 1.0f, 7.0f, false, 0.0f) == 7);
  CHECK(quantize(std::numeric_limits<float>::quiet_NaN(), 1.0f, 127.0f, false, 0.0f) == 0);
  CHECK(quantize(2.25f, 1.0f, 127.0f, true, 0.74f) == 2);
  CHECK(quantize(2.25f, 1.0f, 127.0f, true, 0.76f) == 3);
}

TEST_CASE("the onebit scale is the canonical lane sum of |x| over the count") {
  // 40 elements: lanes 0..7 get two elements, 8..31 one; the fold is exact for small integers.
  std::vector<float> g(40);
  for (int i = 0; i < 40; ++i) g[i] = (i % 3 == 0 ? -1.0f : 1.0f) * float(i + 1);
  float scale = 0;
  uint32_t bits[2] = {};
  cpu::onebit_encode(g.data(), nullptr, g.size(), 64, &scale, bits);
  CHECK(scale == doctest::Approx(820.0 / 40.0));  // sum 1..40 = 820
  CHECK((bits[0] & 1u) == 1u);                    // element 0 is -1
  CHECK((bits[0] >> 1 & 1u) == 0u);
  CHECK((bits[1] >> 6 & 1u) == 0u);  // element 38 = +39
  CHECK((bits[1] >> 7 & 1u) == 1u);  // element 39 = -40
}
