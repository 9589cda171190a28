#include <doctest/doctest.h>

#include <cmath>

#include "compression/error_feedback.hpp"
#include "compression/factory.hpp"
#include "core/error.hpp"
#include "test_util.hpp"

using namespace geotrain;
using namespace geotrain::compression;

namespace {
const char* kLossySpecs[] = {"fp16",
                             "bf16",
                             "int8",
                             "int8:stochastic,seed=3",
                             "int4:chunk=64",
                             "onebit",
                             "onebit:chunk=32",
                             "topk:ratio=0.05",
                             "onebit+zstd",
                             "topk:ratio=0.01+zstd",
                             "fp4",
                             "fp4:chunk=32",
                             "topk:ratio=0.05,bits=2",
                             "topk:ratio=0.02,bits=4,chunk=256",
                             "topk:ratio=0.1,bits=8,chunk=32+zstd"};
}

TEST_CASE("EF invariant: decoded outputs plus the final residual sum to the inputs") {
  for (const char* spec : kLossySpecs) {
    CAPTURE(spec);
    ErrorFeedback ef(make_codec(spec));
    const size_t n = 3000;
    std::vector<double> sent(n, 0.0), decoded_sum(n, 0.0);
    std::vector<float> decoded(n);
    Bytes payload;
    for (int round = 0; round < 20; ++round) {
      auto g = test::heavy_tailed(n, 100 + round);
      ef.encode(7, g, payload);
      decode_payload(payload, decoded);
      for (size_t i = 0; i < n; ++i) {
        sent[i] += g[i];
        decoded_sum[i] += decoded[i];
      }
    }
    auto e = ef.residual(7);
    REQUIRE(e.size() == n);
    for (size_t i = 0; i < n; ++i) {
      // float rounding in x = g + e and e = x - D(c): a few ulps of the running magnitudes
      const double tol = 1e-5 * (std::fabs(sent[i]) + std::fabs(decoded_sum[i]) + 20.0);
      REQUIRE(std::fabs(decoded_sum[i] + e[i] - sent[i]) <= tol);
    }
  }
}

TEST_CASE("the fused EF path produces the reference path's bytes and residual exactly") {
  for (const char* spec : kLossySpecs) {
    CAPTURE(spec);
    ErrorFeedback fused(make_codec(spec), true);
    ErrorFeedback reference(make_codec(spec), false);
    Bytes a, b;
    for (int round = 0; round < 5; ++round) {
      auto g = test::gaussian(5000 + 13, 200 + round);
      fused.encode(1, g, a);
      reference.encode(1, g, b);
      REQUIRE(a == b);
      auto ea = fused.residual(1);
      auto eb = reference.residual(1);
      REQUIRE(std::equal(ea.begin(), ea.end(), eb.begin(), eb.end()));
    }
  }
}

TEST_CASE("EF keeps one residual per stream, and a length change is refused") {
  ErrorFeedback ef(make_codec("onebit"));
  Bytes out;
  ef.encode(1, test::gaussian(100, 1), out);
  ef.encode(2, test::gaussian(50, 2), out);
  CHECK(ef.residual(1).size() == 100);
  CHECK(ef.residual(2).size() == 50);
  CHECK(ef.residual(3).empty());
  const std::vector<float> before(ef.residual(1).begin(), ef.residual(1).end());
  CHECK_THROWS_WITH_AS(ef.encode(1, test::gaussian(99, 3), out),
                       doctest::Contains("stream 1 has a residual of 100 elements, but 99"),
                       InputError);
  CHECK(std::equal(before.begin(), before.end(), ef.residual(1).begin()));
  ef.reset(1);
  CHECK(ef.residual(1).empty());
  CHECK(ef.streams() == std::vector<uint64_t>{2});
}

namespace {
// Gradient descent on f(w) = 1/2 sum a_i (w_i - w*_i)^2 with compressed gradients. Returns the
// final distance to the optimum.
double descend(std::unique_ptr<Codec> codec, bool with_feedback, int steps) {
  const size_t n = 512;
  auto target = test::gaussian(n, 11);
  std::vector<float> a(n), w(n, 0.0f), grad(n), step(n);
  for (size_t i = 0; i < n; ++i) a[i] = 0.5f + float(i % 7) / 4.0f;
  ErrorFeedback ef(std::move(codec));
  Bytes payload;
  for (int t = 0; t < steps; ++t) {
    for (size_t i = 0; i < n; ++i) grad[i] = a[i] * (w[i] - target[i]);
    if (with_feedback)
      ef.encode(0, grad, payload);
    else
      ef.codec().encode(grad, payload);
    decode_payload(payload, step);
    const float lr = 0.2f / (1.0f + float(t) / 200.0f);
    for (size_t i = 0; i < n; ++i) w[i] -= lr * step[i];
  }
  double d = 0;
  for (size_t i = 0; i < n; ++i) d += double(w[i] - target[i]) * double(w[i] - target[i]);
  return std::sqrt(d);
}
}  // namespace

TEST_CASE("EF with onebit on a convex quadratic reaches the optimum of uncompressed SGD") {
  const double sgd = descend(make_codec("fp32"), false, 3000);
  const double onebit_ef = descend(make_codec("onebit:chunk=64"), true, 3000);
  const double onebit_plain = descend(make_codec("onebit:chunk=64"), false, 3000);
  MESSAGE("distance to optimum: sgd ", sgd, ", onebit+EF ", onebit_ef, ", onebit without EF ",
          onebit_plain);
  CHECK(sgd < 1e-4);
  CHECK(onebit_ef < 1e-2);              // ||w*|| is about 22: within 0.05%
  CHECK(onebit_ef < onebit_plain / 3);  // and EF is what gets it there
}

TEST_CASE("EF with fp4 and with 2-bit chunked topk on a convex quadratic nears the optimum") {
  const double fp4_ef = descend(make_codec("fp4:chunk=64"), true, 3000);
  const double topk_ef = descend(make_codec("topk:ratio=0.05,bits=2,chunk=64"), true, 3000);
  const double topk_plain = descend(make_codec("topk:ratio=0.05,bits=2,chunk=64"), false, 3000);
  MESSAGE("distance to optimum: fp4+EF ", fp4_ef, ", topk 5% 2-bit+EF ", topk_ef, ", without EF ",
          topk_plain);
  CHECK(fp4_ef < 1e-2);
  CHECK(topk_ef < 1e-2);
  CHECK(topk_ef < topk_plain / 3);
}
