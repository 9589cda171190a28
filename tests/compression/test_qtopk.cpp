// topk with quantised values ("topk:ratio=R,bits=B", wire id qtopk): chunked selection, values as
// sign + level of the chunk's absmax, chunk-relative packed indices.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "compression/codecs.hpp"
#include "compression/error_feedback.hpp"
#include "compression/factory.hpp"
#include "core/error.hpp"
#include "kernels/qtopk.hpp"
#include "test_util.hpp"

using namespace geotrain;
using namespace geotrain::compression;
using geotrain::test::encode;
using geotrain::test::poke;
using geotrain::test::reseal;

namespace {

std::vector<float> decoded(const Bytes& p, size_t n) {
  std::vector<float> y(n, 123.0f);
  decode_payload(p, y);
  return y;
}

void expect_rejected(const Bytes& p, size_t n, const std::string& needle) {
  std::vector<float> y(n, -7.25f);
  CHECK_THROWS_WITH_AS(make_codec("topk:ratio=0.1,bits=2,chunk=32")->decode(p, y),
                       doctest::Contains(needle.c_str()), InputError);
  for (float v : y) REQUIRE(v == -7.25f);
}

// The hand-computed input: chunk 32, ratio 0.1 (k = ceil(3.2) = 4; the last chunk of 8 keeps
// ceil(4 * 8 / 32) = 1), 2-bit values (levels absmax/2 and absmax), 5-bit indices.
std::vector<float> hand_input() {
  std::vector<float> x(40, 0.0f);
  x[3] = 4.0f;
  x[7] = -1.5f;
  x[10] = 0.5f;  // fifth largest: not sent
  x[11] = -0.5f;
  x[20] = 2.0f;
  x[31] = -3.0f;
  for (size_t i = 32; i < 40; ++i) x[i] = 0.125f;
  x[37] = -0.25f;
  return x;
}

}  // namespace

TEST_CASE("topk with bits encodes a hand-computed input to exactly these bytes") {
  const Bytes p = encode("topk:ratio=0.1,bits=2,chunk=32", hand_input());
  // Chunk 0: absmax 4, v = |x| * 2/4: 4 -> 2 -> level 1 (4); -1.5 -> 0.75 -> level 0 (-2);
  // 2 -> 1 -> level 0 (2); -3 -> 1.5 -> 2 (ties to even) -> level 1 (-4). In index order
  // 3, 7, 20, 31 the codes are 1, 2|0, 0, 2|1: byte 0b11'00'10'01 = 0xC9. The indices, 5 bits
  // each, LSB first: 3 | 7 << 5 | 20 << 10 | 31 << 15 = 0x0FD0E3.
  // Chunk 1: absmax 0.25; -0.25 at relative index 5 -> level 1, negative: code 3; index 0x05.
  const uint8_t body[] = {0x00, 0x00, 0x80, 0x40,   // scale 4.0f
                          0x00, 0x00, 0x80, 0x3e,   // scale 0.25f
                          0xC9, 0x03,               // values
                          0xE3, 0xD0, 0x0F, 0x05};  // indices
  REQUIRE(p.size() == kHeaderBytes + sizeof body);
  CHECK(std::memcmp(p.data() + kHeaderBytes, body, sizeof body) == 0);
  const PayloadHeader h = parse_header(p);
  CHECK(h.codec == CodecId::qtopk);
  CHECK(h.chunk == 32);
  CHECK(h.aux == (4u | 2u << 24));
  std::vector<float> expected(40, 0.0f);
  expected[3] = 4;
  expected[7] = -2;
  expected[20] = 2;
  expected[31] = -4;
  expected[37] = -0.25f;
  CHECK(decoded(p, 40) == expected);
}

TEST_CASE("with error feedback the residual holds what was not sent and the quantisation error") {
  auto x = hand_input();
  std::vector<float> residual(x.size(), 0.0f);
  Bytes p;
  REQUIRE(make_codec("topk:ratio=0.1,bits=2,chunk=32")->encode_with_feedback(x, residual, p));
  std::vector<float> expected = x;  // unsent entries stay whole
  expected[3] = 0;                  // 4 - 4
  expected[7] = 0.5f;               // -1.5 - (-2)
  expected[20] = 0;                 // 2 - 2
  expected[31] = 1;                 // -3 - (-4)
  expected[37] = 0;                 // -0.25 - (-0.25)
  CHECK(residual == expected);
}

TEST_CASE("topk with bits keeps exactly the k = ceil(ratio*chunk) largest |x| of every chunk") {
  for (uint32_t bits : {2u, 4u, 8u}) {
    for (double ratio : {0.001, 0.02, 0.3, 1.0}) {
      const uint32_t chunk = 256;
      CAPTURE(bits);
      CAPTURE(ratio);
      auto x = test::heavy_tailed(5000 + 17, bits);  // a partial last chunk of 145
      auto y = decoded(encode(fmt::format("topk:ratio={},bits={},chunk={}", ratio, bits, chunk), x),
                       x.size());
      const uint64_t k = topk_count(chunk, ratio);
      for (size_t begin = 0; begin < x.size(); begin += chunk) {
        const size_t count = std::min<size_t>(chunk, x.size() - begin);
        const uint64_t kc = count == chunk ? k : (k * count + chunk - 1) / chunk;
        std::vector<float> mags(x.begin() + begin, x.begin() + begin + count);
        for (float& m : mags) m = std::fabs(m);
        std::sort(mags.begin(), mags.end(), std::greater<>());
        const float absmax = mags[0], kth = mags[kc - 1];
        const float levels = float(1u << (bits - 1));
        size_t kept = 0;
        for (size_t i = begin; i < begin + count; ++i) {
          if (y[i] == 0.0f) {
            REQUIRE(std::fabs(x[i]) <= kth);
            continue;
          }
          ++kept;
          REQUIRE(std::fabs(x[i]) >= kth);
          REQUIRE(std::signbit(y[i]) == std::signbit(x[i]));
          // a level of absmax/L .. absmax, within half a step (or the lowest level, for small |x|)
          const float step = absmax / levels;
          const float err = std::fabs(y[i] - x[i]);
          if (std::fabs(x[i]) >= step / 2)
            REQUIRE(err <= step / 2 * (1 + 1e-5f));
          else
            REQUIRE(std::fabs(y[i]) == step);
        }
        CHECK(kept == kc);
      }
    }
  }
}

TEST_CASE("topk with bits breaks ties by the lower index, chunk by chunk") {
  // k = 4 of 32 (selected by nth_element) and k = 6 of 256 (by the min-heap).
  for (auto [spec, chunk, k] : {std::tuple{"topk:ratio=0.1,bits=4,chunk=32", 32, 4},
                                std::tuple{"topk:ratio=0.02,bits=4,chunk=256", 256, 6}}) {
    CAPTURE(spec);
    std::vector<float> x(2 * chunk, 1.0f);
    x[chunk + 9] = -2.0f;  // the second chunk's largest, then its first k - 1 ones
    auto y = decoded(encode(spec, x), x.size());
    for (int i = 0; i < 2 * chunk; ++i) {
      const bool kept = i < chunk ? i < k : (i == chunk + 9 || i - chunk < k - 1);
      REQUIRE((y[i] != 0.0f) == kept);
    }
  }
}

TEST_CASE("topk without bits is today's codec, byte for byte") {
  auto x = test::heavy_tailed(3000, 4);
  auto a = encode("topk:ratio=0.02", x);
  Bytes b;
  make_topk_codec({0.02, 4096})->encode(x, b);
  CHECK(a == b);
  CHECK(parse_header(a).codec == CodecId::topk);
  CHECK(make_codec("topk:ratio=0.02")->spec() == "topk:ratio=0.02,sample=4096");
}

TEST_CASE("topk:ratio=0.02,bits=2 costs 32 + 8*ceil(2k/8) + 8*ceil(10k/8) bits per 1024 elements") {
  // k = ceil(0.02 * 1024) = 21: a 32-bit scale, 6 bytes of values, 27 bytes of 10-bit indices.
  auto x = test::gaussian(1 << 20, 9);
  auto codec = make_codec("topk:ratio=0.02,bits=2");
  Bytes p;
  codec->encode(x, p);
  const double per_element = (32.0 + 8 * 6 + 8 * 27) / 1024.0;  // 0.2890625
  CHECK(8.0 * double(p.size() - kHeaderBytes) / double(x.size()) == per_element);
  CHECK(p.size() == codec->max_payload_bytes(x.size()));
  // 4 and 8 bits: 11 and 21 value bytes per chunk.
  Bytes p4, p8;
  make_codec("topk:ratio=0.02,bits=4")->encode(x, p4);
  make_codec("topk:ratio=0.02,bits=8")->encode(x, p8);
  CHECK(p4.size() - kHeaderBytes == 1024 * (4 + 11 + 27));
  CHECK(p8.size() - kHeaderBytes == 1024 * (4 + 21 + 27));
}

TEST_CASE("topk with bits under zstd decodes to the inner codec's values") {
  auto x = test::heavy_tailed(20'000, 5);
  auto plain = decoded(encode("topk:ratio=0.02,bits=2", x), x.size());
  auto packed = decoded(encode("topk:ratio=0.02,bits=2+zstd", x), x.size());
  CHECK(plain == packed);
  CHECK(parse_header(encode("topk:ratio=0.02,bits=2+zstd", x)).aux ==
        static_cast<uint8_t>(CodecId::qtopk));
}

TEST_CASE("EF with 2-bit chunked topk sends every entry eventually: the residual stays bounded") {
  // The same g every round: what is not sent accumulates until it is among a chunk's largest.
  ErrorFeedback ef(make_codec("topk:ratio=0.05,bits=2,chunk=64"));
  const size_t n = 4096;
  auto g = test::gaussian(n, 12);
  std::vector<double> sum(n, 0.0);
  std::vector<float> y(n);
  Bytes p;
  const int rounds = 400;
  for (int r = 0; r < rounds; ++r) {
    ef.encode(0, g, p);
    decode_payload(p, y);
    for (size_t i = 0; i < n; ++i) sum[i] += y[i];
  }
  double err = 0, ref = 0;
  for (size_t i = 0; i < n; ++i) {
    err += (sum[i] - rounds * double(g[i])) * (sum[i] - rounds * double(g[i]));
    ref += rounds * double(g[i]) * rounds * double(g[i]);
  }
  MESSAGE("relative error of the sum after ", rounds, " rounds: ", std::sqrt(err / ref));
  CHECK(std::sqrt(err / ref) < 0.05);
}

TEST_CASE("bad qtopk payloads are input errors that name the problem, output untouched") {
  const auto x = hand_input();
  const Bytes clean = encode("topk:ratio=0.1,bits=2,chunk=32", x);
  const size_t indices = kHeaderBytes + 8 + 2;

  Bytes p = clean;
  p.pop_back();
  expect_rejected(p, x.size(), "truncated");
  reseal(p);
  expect_rejected(p, x.size(), "body is 13 bytes, but 40 elements in chunks of 32 with k = 4");

  p = clean;
  p.push_back(std::byte{0});
  reseal(p);
  expect_rejected(p, x.size(), "need 14");

  p = clean;
  poke<uint32_t>(p, 12, 4u | 3u << 24);
  reseal(p);
  expect_rejected(p, x.size(), "value bits 3 is invalid");

  p = clean;
  poke<uint32_t>(p, 12, 33u | 2u << 24);
  reseal(p);
  expect_rejected(p, x.size(), "k = 33 per chunk is invalid");

  p = clean;
  poke<uint32_t>(p, 8, 48);
  reseal(p);
  expect_rejected(p, x.size(), "chunk 48 is invalid");

  p = clean;
  p[indices + 3] = std::byte{0x0F};  // chunk 1 (8 elements): relative index 15
  reseal(p);
  expect_rejected(p, x.size(), "index 0 of chunk 1 is 15, out of range [0, 8)");

  p = clean;
  p[indices] = std::byte{0xE7};  // first index 7, then 7 again
  reseal(p);
  expect_rejected(p, x.size(), "index 1 of chunk 0 is 7, not above the previous 7");

  std::vector<float> wrong(x.size() + 1);
  CHECK_THROWS_WITH_AS(decode_payload(clean, wrong),
                       doctest::Contains("holds 40 elements, but the output has 41"), InputError);
}

TEST_CASE("the layout's sizes add up, for every chunk, k and bit width") {
  for (uint32_t chunk : {32u, 96u, 1024u, 1u << 20}) {
    for (uint32_t k : {1u, 7u, chunk}) {
      for (uint32_t bits : {2u, 4u, 8u}) {
        for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{chunk}, uint64_t{3} * chunk + 5}) {
          const kernels::QtopkLayout l{n, chunk, k, bits};
          uint64_t total = 4 * l.chunks(), kept = 0;
          for (uint64_t c = 0; c < l.chunks(); ++c) {
            total += (l.k_of(c) * bits + 7) / 8 + (l.k_of(c) * l.index_bits() + 7) / 8;
            kept += l.k_of(c);
            REQUIRE(l.k_of(c) >= 1);
            REQUIRE(l.k_of(c) <= l.count(c));
          }
          REQUIRE(l.body_bytes() == total);
          REQUIRE(l.selected() == kept);
          REQUIRE((uint64_t{1} << l.index_bits()) >= chunk);
          REQUIRE((uint64_t{1} << (l.index_bits() - 1)) < chunk);
        }
      }
    }
  }
}
