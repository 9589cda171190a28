#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>

#include "compression/codecs.hpp"
#include "compression/factory.hpp"
#include "core/error.hpp"
#include "kernels/codec_math.hpp"
#include "test_util.hpp"

using namespace geotrain;
using namespace geotrain::compression;
using geotrain::test::roundtrip;

namespace {
float chunk_absmax(const std::vector<float>& x, size_t begin, size_t count) {
  float m = 0;
  for (size_t i = begin; i < begin + count; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}
}  // namespace

TEST_CASE("fp32 is the identity, bit for bit") {
  auto x = test::heavy_tailed(1001, 1);
  auto codec = make_fp32_codec();
  CHECK(roundtrip(*codec, x) == x);
  CHECK(codec->lossless());
}

TEST_CASE("fp16 and bf16 decode each element to its nearest representable value") {
  auto x = test::gaussian(5000, 2);
  auto h = roundtrip(*make_fp16_codec(), x);
  auto b = roundtrip(*make_bf16_codec(), x);
  for (size_t i = 0; i < x.size(); ++i) {
    REQUIRE(h[i] == kernels::fp16_to_float(kernels::fp16_from_float(x[i])));
    REQUIRE(std::fabs(h[i] - x[i]) <= std::fabs(x[i]) * 0x1.0p-11f + 0x1.0p-25f);
    REQUIRE(b[i] == kernels::bf16_to_float(kernels::bf16_from_float(x[i])));
    REQUIRE(std::fabs(b[i] - x[i]) <= std::fabs(x[i]) * 0x1.0p-8f);
  }
}

TEST_CASE("int8 decodes every element to within scale/2") {
  for (uint32_t chunk : {32u, 256u, 1024u}) {
    auto x = test::heavy_tailed(10'000 + 17, chunk);  // a partial last chunk
    Bytes payload;
    auto y = roundtrip(*make_int8_codec({chunk}), x, &payload);
    for (size_t begin = 0; begin < x.size(); begin += chunk) {
      const size_t count = std::min<size_t>(chunk, x.size() - begin);
      const float scale = chunk_absmax(x, begin, count) / 127.0f;
      for (size_t i = begin; i < begin + count; ++i)
        REQUIRE(std::fabs(y[i] - x[i]) <= scale * 0.5f * (1 + 1e-5f));
    }
  }
}

TEST_CASE("int4 decodes every element to within scale/2 with 15 levels") {
  auto x = test::gaussian(4099, 3);
  auto y = roundtrip(*make_int4_codec({256}), x);
  std::set<float> levels_in_chunk0;
  for (size_t begin = 0; begin < x.size(); begin += 256) {
    const size_t count = std::min<size_t>(256, x.size() - begin);
    const float scale = chunk_absmax(x, begin, count) / 7.0f;
    for (size_t i = begin; i < begin + count; ++i) {
      REQUIRE(std::fabs(y[i] - x[i]) <= scale * 0.5f * (1 + 1e-5f));
      if (begin == 0) levels_in_chunk0.insert(std::round(y[i] / scale));
    }
  }
  CHECK(levels_in_chunk0.size() <= 15);
  CHECK(*levels_in_chunk0.begin() >= -7);
  CHECK(*levels_in_chunk0.rbegin() <= 7);
}

TEST_CASE("int4 with step=2 quantises by twice each chunk's RMS and clips at 7 steps") {
  // Chunk 0: 31 ones and a 100 (RMS sqrt(10031/32) = 17.70, step 35.41): the 100 is 2.82 steps,
  // sent as 3; the ones are 0.03 steps, sent as 0. Chunk 1 at step=0.25 clips: the 100 is 22.6
  // steps of 4.43 and goes as 7. The residual keeps what was not sent.
  std::vector<float> x(64, 1.0f);
  x[0] = 100.0f;
  x[32] = 100.0f;
  for (float step : {2.0f, 0.25f}) {
    CAPTURE(step);
    auto codec = make_int4_codec({.chunk = 32, .step = step});
    std::vector<float> residual(x.size(), 0.0f);
    Bytes payload;
    REQUIRE(codec->encode_with_feedback(x, residual, payload));
    std::vector<float> y(x.size());
    codec->decode(payload, y);
    const double rms = std::sqrt((100.0 * 100.0 + 31.0) / 32.0);
    const double scale = step * rms;
    const double q = std::min(7.0, std::nearbyint(100.0 / scale));  // 3 at step 2, 7 (clipped) at 1
    CHECK(y[0] == doctest::Approx(q * scale).epsilon(1e-6));
    CHECK(y[1] == 0.0f);
    CHECK(y[32] == y[0]);
    CHECK(residual[0] == doctest::Approx(100.0 - q * scale).epsilon(1e-5));
    CHECK(residual[1] == 1.0f);
  }
}

TEST_CASE("int4 with step=2 and zstd level 19 packs Gaussian deltas into under 1.45 bits") {
  // About 68% of the elements go as 0 and 31% as +-1: an entropy of 1.24 bits. zstd at level 19
  // makes 1.41 bits of the payload (1.27 of the values alone: the fp32 scales in front cost it
  // more than their own 0.008 bits); plain int4 is 4 bits.
  auto x = test::gaussian(1 << 20, 9);
  Bytes plain, packed;
  make_codec("int4:chunk=4096,step=2")->encode(x, plain);
  make_codec("int4:chunk=4096,step=2+zstd:level=19")->encode(x, packed);
  const double bits = 8.0 * double(packed.size()) / double(x.size());
  CHECK(bits < 1.45);
  CHECK(bits > 1.24);
  std::vector<float> a(x.size()), b(x.size());
  decode_payload(plain, a);
  decode_payload(packed, b);
  CHECK(a == b);
  double err = 0, energy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += double(x[i] - a[i]) * (x[i] - a[i]);
    energy += double(x[i]) * x[i];
  }
  CHECK(err / energy == doctest::Approx(0.331).epsilon(0.02));  // onebit's best: 0.363
}

TEST_CASE("stochastic rounding is unbiased and stays on the two nearest levels") {
  // x sits at 0.3 of the way between levels 12 and 13 of a chunk whose absmax is 127.
  std::vector<float> x(1024, 12.3f);
  x[0] = 127.0f;
  auto codec = make_int8_codec({1024, true, 99});
  double mean = 0;
  const int rounds = 200;
  for (int r = 0; r < rounds; ++r) {
    auto y = roundtrip(*codec, x);
    for (size_t i = 1; i < x.size(); ++i) {
      REQUIRE((y[i] == 12.0f || y[i] == 13.0f));
      mean += y[i];
    }
  }
  mean /= double(rounds) * 1023.0;
  CHECK(mean == doctest::Approx(12.3).epsilon(0.002));
}

TEST_CASE("onebit decodes to +-scale with the sign of x, scale = the chunk's mean |x|") {
  auto x = test::gaussian(3000 + 5, 4);
  const uint32_t chunk = 512;
  auto y = roundtrip(*make_onebit_codec(chunk), x);
  for (size_t begin = 0; begin < x.size(); begin += chunk) {
    const size_t count = std::min<size_t>(chunk, x.size() - begin);
    double mean_abs = 0;
    for (size_t i = begin; i < begin + count; ++i) mean_abs += std::fabs(x[i]);
    mean_abs /= double(count);
    for (size_t i = begin; i < begin + count; ++i) {
      REQUIRE(std::fabs(y[i]) == doctest::Approx(mean_abs).epsilon(1e-5));
      REQUIRE(std::signbit(y[i]) == (x[i] < 0));
      REQUIRE(std::fabs(y[i]) == std::fabs(y[begin]));
    }
  }
}

TEST_CASE("the onebit scale minimises the squared error for its sign pattern") {
  auto x = test::heavy_tailed(1024, 5);
  auto y = roundtrip(*make_onebit_codec(1024), x);
  const float s = std::fabs(y[0]);
  auto sse = [&](float scale) {
    double e = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double d = x[i] - (x[i] < 0 ? -scale : scale);
      e += d * d;
    }
    return e;
  };
  CHECK(sse(s) <= sse(s * 1.01f));
  CHECK(sse(s) <= sse(s * 0.99f));
}

TEST_CASE("onebit with scale=rms decodes [3, -4] to +-sqrt(12.5) = +-3.5355") {
  auto y = roundtrip(*make_codec("onebit:scale=rms"), {3.0f, -4.0f});
  // Lanes 9 and 16 fold to 25, exactly; 25 / 2 = 12.5; sqrt rounds once (IEEE).
  const float s = std::sqrt(12.5f);  // 3.5355339
  CHECK(y == std::vector<float>{s, -s});
  // scale=mean on the same chunk: (3 + 4) / 2.
  CHECK(roundtrip(*make_codec("onebit"), {3.0f, -4.0f}) == std::vector<float>{3.5f, -3.5f});
}

TEST_CASE("onebit with scale=rms keeps each chunk's L2 norm") {
  auto x = test::heavy_tailed(3000 + 5, 8);
  const uint32_t chunk = 512;
  auto y = roundtrip(*make_onebit_codec(chunk, OnebitScale::rms), x);
  for (size_t begin = 0; begin < x.size(); begin += chunk) {
    const size_t count = std::min<size_t>(chunk, x.size() - begin);
    double xx = 0, yy = 0;
    for (size_t i = begin; i < begin + count; ++i) {
      xx += double(x[i]) * x[i];
      yy += double(y[i]) * y[i];
      REQUIRE(std::signbit(y[i]) == (x[i] < 0));
      REQUIRE(std::fabs(y[i]) == std::fabs(y[begin]));
    }
    REQUIRE(std::sqrt(yy) == doctest::Approx(std::sqrt(xx)).epsilon(1e-5));
  }
}

TEST_CASE("onebit's scale choice changes only the scales: same size, same signs, same decoder") {
  auto x = test::gaussian(2048 + 40, 9);
  Bytes mean, rms;
  auto y_mean = roundtrip(*make_codec("onebit"), x, &mean);
  auto y_rms = roundtrip(*make_codec("onebit:scale=rms"), x, &rms);
  REQUIRE(mean.size() == rms.size());
  const size_t scales_end = kHeaderBytes + 4 * 3;  // three chunks of 1024
  CHECK(std::equal(mean.begin() + scales_end, mean.end(), rms.begin() + scales_end));
  CHECK(std::equal(mean.begin(), mean.begin() + 32, rms.begin()));  // header, bar the checksum
  std::vector<float> y(x.size());
  decode_payload(rms, y);  // the generic decoder needs nothing new
  CHECK(y == y_rms);
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(std::fabs(y_rms[i]) >= std::fabs(y_mean[i]));
}

TEST_CASE("topk keeps exactly the k largest magnitudes and zeroes the rest") {
  for (double ratio : {0.001, 0.01, 0.1, 0.5, 1.0}) {
    auto x = test::heavy_tailed(20'000, 6);
    auto y = roundtrip(*make_topk_codec({ratio, 4096}), x);
    const uint64_t k = topk_count(x.size(), ratio);
    std::vector<float> mags(x.size());
    for (size_t i = 0; i < x.size(); ++i) mags[i] = std::fabs(x[i]);
    std::nth_element(mags.begin(), mags.begin() + (k - 1), mags.end(), std::greater<>());
    const float kth = mags[k - 1];
    size_t kept = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (y[i] != 0.0f) {
        ++kept;
        REQUIRE(y[i] == x[i]);
        REQUIRE(std::fabs(x[i]) >= kth);
      } else {
        REQUIRE(std::fabs(x[i]) <= kth);
      }
    }
    CHECK(kept == k);
  }
}

TEST_CASE("topk finds the k largest even when the sample misjudges the threshold") {
  // All mass in a few entries the sample is unlikely to see: the threshold must be lowered.
  std::vector<float> x(100'000, 1e-6f);
  for (size_t i = 0; i < 50; ++i) x[i * 1999] = float(i + 1);
  auto y = roundtrip(*make_topk_codec({0.0005, 64}), x);
  for (size_t i = 0; i < 50; ++i) CHECK(y[i * 1999] == float(i + 1));
  CHECK(std::count_if(y.begin(), y.end(), [](float v) { return v != 0; }) == 50);
}

TEST_CASE("topk with ties picks the lowest indices among equal magnitudes") {
  std::vector<float> x(100, 1.0f);
  auto y = roundtrip(*make_topk_codec({0.1, 64}), x);
  for (size_t i = 0; i < 100; ++i) CHECK(y[i] == (i < 10 ? 1.0f : 0.0f));
}

TEST_CASE("topk_indices reads a body's indices: the k largest |x|, ascending") {
  // A receiver that scatters on a device parses the indices on the host (bench codecs): they
  // must be those of the k largest magnitudes (ties: the lower index), each with its value.
  auto x = test::heavy_tailed(20'000, 8);
  Bytes payload;
  make_topk_codec({0.01, 4096})->encode(x, payload);
  const uint64_t k = topk_count(x.size(), 0.01);
  const auto body = payload_body(payload);
  const std::vector<uint64_t> index = topk_indices(body, k, x.size());

  std::vector<uint64_t> expected(x.size());
  std::iota(expected.begin(), expected.end(), 0);
  std::stable_sort(expected.begin(), expected.end(),
                   [&](uint64_t a, uint64_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  expected.resize(k);
  std::sort(expected.begin(), expected.end());
  REQUIRE(index == expected);
  for (uint64_t j = 0; j < k; ++j) {
    float v;
    std::memcpy(&v, body.data() + 4 * j, 4);
    REQUIRE(v == x[index[j]]);
  }
  // A body cut inside its varints names what is wrong.
  CHECK_THROWS_WITH_AS(topk_indices(body.first(body.size() - 1), k, x.size()),
                       doctest::Contains("is truncated"), InputError);
}

TEST_CASE("every codec is deterministic: same input, same bytes") {
  auto x = test::heavy_tailed(7777, 7);
  for (const auto& spec : standard_codec_specs()) {
    CAPTURE(spec);
    Bytes a, b;
    make_codec(spec)->encode(x, a);
    make_codec(spec)->encode(x, b);
    CHECK(a == b);
  }
}

TEST_CASE("decode_add accumulates exactly what decode writes") {
  auto x = test::gaussian(2049, 8);
  for (const auto& spec : standard_codec_specs()) {
    CAPTURE(spec);
    auto codec = make_codec(spec);
    Bytes payload;
    codec->encode(x, payload);
    std::vector<float> decoded(x.size());
    codec->decode(payload, decoded);
    std::vector<float> acc(x.size(), 0.5f);
    codec->decode_add(payload, acc);
    for (size_t i = 0; i < x.size(); ++i) REQUIRE(acc[i] == 0.5f + decoded[i]);
    std::vector<float> generic(x.size());
    decode_payload(payload, generic);  // by header alone
    CHECK(generic == decoded);
  }
}

TEST_CASE("wire size: onebit <= 1.05, int8 <= 8.1, int4 <= 4.1 bits per element by default") {
  auto x = test::gaussian(1 << 20, 9);
  auto bits = [&](std::unique_ptr<Codec> c) {
    Bytes p;
    c->encode(x, p);
    return 8.0 * double(p.size()) / double(x.size());
  };
  CHECK(bits(make_onebit_codec()) <= 1.05);
  CHECK(bits(make_int8_codec()) <= 8.1);
  CHECK(bits(make_int4_codec()) <= 4.1);
  CHECK(bits(make_fp16_codec()) <= 16.01);
  CHECK(bits(make_topk_codec({0.01, 4096})) <= 0.01 * (32 + 16) + 0.01);
}

TEST_CASE("zstd shrinks redundant payloads and decodes to the inner codec's values") {
  std::vector<float> x(100'000, 0.0f);
  for (size_t i = 0; i < x.size(); i += 10) x[i] = 1.0f;
  Bytes plain, packed;
  make_codec("int8")->encode(x, plain);
  auto stage = make_codec("int8+zstd");
  stage->encode(x, packed);
  CHECK(packed.size() * 5 < plain.size());
  std::vector<float> a(x.size()), b(x.size());
  decode_payload(plain, a);
  stage->decode(packed, b);
  CHECK(a == b);
}

TEST_CASE("empty and tiny inputs round-trip") {
  for (const auto& spec : standard_codec_specs()) {
    CAPTURE(spec);
    for (size_t n : {0u, 1u, 31u, 33u}) {
      auto x = test::gaussian(n, 10);
      auto codec = make_codec(spec);
      Bytes payload;
      codec->encode(x, payload);
      // NaN-filled: a decoder that wrote nothing (or not every element) leaves a NaN behind.
      std::vector<float> y(n, std::numeric_limits<float>::quiet_NaN());
      codec->decode(payload, y);
      double error = 0, norm = 0;
      for (size_t i = 0; i < n; ++i) {
        if (spec.rfind("fp32", 0) == 0) REQUIRE(y[i] == x[i]);
        REQUIRE(std::isfinite(y[i]));
        error += (y[i] - x[i]) * (y[i] - x[i]);
        norm += x[i] * x[i];
      }
      // Every codec keeps some of the input: a lossy code of a tiny input is no worse than
      // sending zeros (top-k keeps the largest values, onebit their signs and scale).
      if (n > 0) CHECK(error < norm);
    }
  }
}
