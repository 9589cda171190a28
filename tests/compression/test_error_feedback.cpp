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
                             "onebit:scale=rms",
                             "onebit:chunk=32,scale=rms",
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
  for (const float decay : {1.0f, 0.5f, 0.9f}) {
    for (const char* spec : kLossySpecs) {
      CAPTURE(spec);
      CAPTURE(decay);
      ErrorFeedback fused(make_codec(spec), FeedbackOptions{decay, true});
      ErrorFeedback reference(make_codec(spec), FeedbackOptions{decay, false});
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
}

TEST_CASE("decay 1 is the classic order x = g + e, byte for byte, on both paths") {
  for (const char* spec : kLossySpecs) {
    CAPTURE(spec);
    for (const bool use_fused : {true, false}) {
      ErrorFeedback ef(make_codec(spec), FeedbackOptions{1.0f, use_fused});
      auto codec = make_codec(spec);  // the classic order, spelled out
      const size_t n = 2000 + 7;
      std::vector<float> e(n, 0.0f), x(n), decoded(n);
      Bytes got, want;
      for (int round = 0; round < 4; ++round) {
        auto g = test::heavy_tailed(n, 300 + round);
        ef.encode(3, g, got);
        for (size_t i = 0; i < n; ++i) x[i] = g[i] + e[i];
        codec->encode(x, want);
        codec->decode(want, decoded);
        for (size_t i = 0; i < n; ++i) e[i] = x[i] - decoded[i];
        REQUIRE(got == want);
        auto r = ef.residual(3);
        REQUIRE(std::equal(r.begin(), r.end(), e.begin(), e.end()));
      }
    }
  }
}

TEST_CASE("decay 0.5 carries half the residual: onebit on [3, -1] over two rounds") {
  // onebit, one chunk: scale = mean |x|, so every value below is exact in float.
  for (const bool use_fused : {true, false}) {
    CAPTURE(use_fused);
    ErrorFeedback ef(make_codec("onebit:chunk=32"), FeedbackOptions{0.5f, use_fused});
    const std::vector<float> g = {3.0f, -1.0f};
    std::vector<float> y(2);
    Bytes out;
    // Round 1: x = g = [3, -1], scale 2, D = [2, -2], e = [1, 1].
    ef.encode(0, g, out);
    decode_payload(out, y);
    CHECK(y == std::vector<float>{2.0f, -2.0f});
    CHECK(std::vector<float>(ef.residual(0).begin(), ef.residual(0).end()) ==
          std::vector<float>{1.0f, 1.0f});
    // Round 2: x = g + 0.5 e = [3.5, -0.5], scale 2, D = [2, -2], e = [1.5, 1.5]. (Decay 1 would
    // give x = [4, 0], D = [2, 2], e = [2, -2].)
    ef.encode(0, g, out);
    decode_payload(out, y);
    CHECK(y == std::vector<float>{2.0f, -2.0f});
    CHECK(std::vector<float>(ef.residual(0).begin(), ef.residual(0).end()) ==
          std::vector<float>{1.5f, 1.5f});
  }
}

TEST_CASE("a decay outside (0, 1] is an input error naming the value") {
  for (const float bad : {0.0f, 1.5f, -0.5f, std::nanf("")}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(ErrorFeedback(make_codec("onebit"), FeedbackOptions{bad}),
                         doctest::Contains("error feedback decay is"), InputError);
  }
  CHECK_THROWS_WITH_AS(require_feedback_decay(1.5, "worker.error_feedback.decay"),
                       doctest::Contains("worker.error_feedback.decay is 1.5, allowed: (0, 1]"),
                       InputError);
  CHECK(ErrorFeedback(make_codec("onebit"), FeedbackOptions{1.0f}).decay() == 1.0f);
  CHECK(ErrorFeedback(make_codec("onebit")).decay() == 1.0f);
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
