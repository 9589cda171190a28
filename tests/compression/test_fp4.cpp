// fp4: OCP MX E2M1 codes with a per-chunk fp32 scale absmax/6.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "compression/codecs.hpp"
#include "compression/factory.hpp"
#include "core/error.hpp"
#include "kernels/codec_math.hpp"
#include "test_util.hpp"

using namespace geotrain;
using namespace geotrain::compression;
using geotrain::test::roundtrip;

TEST_CASE("the E2M1 magnitudes are 0, 0.5, 1, 1.5, 2, 3, 4, 6, in code order") {
  const float expected[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (unsigned m = 0; m < 8; ++m) {
    CHECK(kernels::fp4_magnitude(m) == expected[m]);
    CHECK(kernels::fp4_code(expected[m], 1.0f) == m);  // each magnitude encodes to itself
    CHECK(kernels::fp4_value(m | 8u, 2.0f) == -2.0f * expected[m]);
  }
}

TEST_CASE("fp4 rounds to the nearest magnitude, and a tie goes to the even code") {
  // (v, code): midpoints 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5 and a value on each side.
  const std::pair<float, unsigned> cases[] = {
      {0.25f, 0}, {0.26f, 1}, {0.74f, 1}, {0.75f, 2}, {1.25f, 2}, {1.26f, 3}, {1.75f, 4},
      {2.5f, 4},  {2.51f, 5}, {3.49f, 5}, {3.5f, 6},  {5.0f, 6},  {5.01f, 7}, {7.0f, 7}};
  for (auto [v, code] : cases) {
    CAPTURE(v);
    CHECK(kernels::fp4_code(v, 1.0f) == code);
    CHECK(kernels::fp4_code(-v, 1.0f) == (code | 8u));
  }
  CHECK(kernels::fp4_code(-0.0f, 1.0f) == 0u);  // -0 and NaN encode as +0
  CHECK(kernels::fp4_code(NAN, 1.0f) == 0u);
}

TEST_CASE("fp4 encodes a hand-computed input to exactly these bytes") {
  // absmax 6, so scale = 1 and v = x: codes 7, D(-3), 1, 2, 2, E(-4), 4, 0 | 4, 6, 8(-0), 7.
  const std::vector<float> x = {6.0f, -3.0f, 0.7f,  0.75f, 1.25f, -5.0f,
                                2.5f, 0.25f, 1.75f, 3.5f,  -0.1f, 6.0f};
  Bytes p;
  make_codec("fp4:chunk=32")->encode(x, p);
  const uint8_t body[] = {0x00, 0x00, 0x80, 0x3f,  // scale 1.0f
                          0xD7, 0x21, 0xE2, 0x04, 0x64, 0x78};
  REQUIRE(p.size() == kHeaderBytes + sizeof body);
  CHECK(std::memcmp(p.data() + kHeaderBytes, body, sizeof body) == 0);
  const PayloadHeader h = parse_header(p);
  CHECK(h.codec == CodecId::fp4);
  CHECK(h.chunk == 32);
  CHECK(h.elements == x.size());
  std::vector<float> y(x.size());
  decode_payload(p, y);
  CHECK(y == std::vector<float>{6, -3, 0.5f, 1, 1, -4, 2, 0, 2, 4, -0.0f, 6});
}

TEST_CASE("fp4 decodes every element to within max(scale/4, |x|/5) of it") {
  // Below 1 the step is 0.5 (error <= scale/4); from 1 up, one mantissa bit: error <= |x|/5.
  for (uint32_t chunk : {32u, 256u, 1024u}) {
    CAPTURE(chunk);
    auto x = test::heavy_tailed(10'000 + 17, chunk);  // a partial last chunk
    auto y = roundtrip(*make_fp4_codec(chunk), x);
    for (size_t begin = 0; begin < x.size(); begin += chunk) {
      const size_t count = std::min<size_t>(chunk, x.size() - begin);
      float absmax = 0;
      for (size_t i = begin; i < begin + count; ++i) absmax = std::max(absmax, std::fabs(x[i]));
      const float scale = absmax / 6.0f;
      std::set<float> levels;
      for (size_t i = begin; i < begin + count; ++i) {
        REQUIRE(std::fabs(y[i] - x[i]) <= std::max(scale / 4, std::fabs(x[i]) / 5) * (1 + 1e-5f));
        REQUIRE((y[i] == 0 || std::signbit(y[i]) == std::signbit(x[i])));
        levels.insert(std::fabs(y[i]) / scale);
      }
      CHECK(levels.size() <= 8);
    }
  }
}

TEST_CASE("fp4 of an all-zero chunk is zero, beside a chunk that is not") {
  std::vector<float> x(100, 0.0f);
  x[70] = -2.0f;  // the second chunk of 64 only
  auto y = roundtrip(*make_codec("fp4:chunk=64"), x);
  for (size_t i = 0; i < x.size(); ++i) CHECK(y[i] == x[i]);
}

TEST_CASE("fp4 costs 4 + 32/chunk bits per element") {
  auto x = test::gaussian(1 << 20, 9);
  for (uint32_t chunk : {32u, 1024u}) {
    Bytes p;
    make_fp4_codec(chunk)->encode(x, p);
    const double bits = 8.0 * double(p.size() - kHeaderBytes) / double(x.size());
    CHECK(bits == doctest::Approx(4.0 + 32.0 / chunk).epsilon(1e-12));
    CHECK(p.size() == make_fp4_codec(chunk)->max_payload_bytes(x.size()));
  }
}

TEST_CASE("fp4 under zstd decodes to fp4's own values") {
  auto x = test::heavy_tailed(5000, 3);
  std::vector<float> plain(x.size()), packed(x.size());
  Bytes a, b;
  make_codec("fp4")->encode(x, a);
  make_codec("fp4+zstd")->encode(x, b);
  decode_payload(a, plain);
  make_codec("fp4+zstd")->decode(b, packed);
  CHECK(plain == packed);
  CHECK(parse_header(b).aux == static_cast<uint8_t>(CodecId::fp4));
}
