// The GPT's CPU ops (kernels/ops/*): closed-form values, and every backward against central
// finite differences of a double-accumulated scalar loss L = sum_i w_i out_i with random w.
// Tolerance for the finite differences: |analytic - numeric| <= 1e-3 + 1e-2 |numeric| with
// step 1e-2 (fp32 forwards: the loss carries ~1e-6 of rounding, ~5e-5 after dividing by 2h).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "kernels/ops/attention.hpp"
#include "kernels/ops/cross_entropy.hpp"
#include "kernels/ops/embedding.hpp"
#include "kernels/ops/gelu.hpp"
#include "kernels/ops/layernorm.hpp"
#include "kernels/ops/matmul.hpp"
#include "kernels/ops/residual.hpp"
#include "kernels/ops/threads.hpp"
#include "kernels/ops/vec_math.hpp"

using namespace geotrain::kernels::cpu;

namespace {

std::vector<float> random_vector(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

double weighted_sum(const std::vector<float>& out, const std::vector<float>& w) {
  double s = 0.0;
  for (size_t i = 0; i < out.size(); ++i) s += double(out[i]) * double(w[i]);
  return s;
}

// Checks `analytic` (dL/dx for every element of x) against central differences of loss(),
// which must recompute L from the current contents of x. Returns the number of mismatches.
size_t count_gradient_mismatches(std::vector<float>& x, const std::vector<float>& analytic,
                                 const std::function<double()>& loss, float h = 1e-2f) {
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2.0 * double(h));
    if (std::abs(analytic[i] - numeric) > 1e-3 + 1e-2 * std::abs(numeric)) {
      if (bad < 5) MESSAGE("element ", i, ": analytic ", analytic[i], " numeric ", numeric);
      ++bad;
    }
  }
  return bad;
}

}  // namespace

TEST_CASE("vexp and vtanh match the libm functions to within 2e-7 relative, 3e-7 absolute") {
  double worst_exp = 0.0, worst_tanh = 0.0;
  for (double x = -87.0; x < 88.0; x += 1e-3) {
    const auto xf = static_cast<float>(x);
    worst_exp =
        std::max(worst_exp, std::abs(vexp(xf) - std::exp(double(xf))) / std::exp(double(xf)));
  }
  for (double x = -12.0; x < 12.0; x += 1e-4) {
    const auto xf = static_cast<float>(x);
    worst_tanh = std::max(worst_tanh, std::abs(vtanh(xf) - std::tanh(double(xf))));
  }
  CHECK(worst_exp < 2e-7);
  CHECK(worst_tanh < 3e-7);
  CHECK(vtanh(40.0f) == 1.0f);
  CHECK(vtanh(-40.0f) == -1.0f);
  CHECK(std::isfinite(vexp(-INFINITY)));
  CHECK(vexp(-INFINITY) < 1e-37f);
  CHECK(std::isfinite(vexp(1e30f)));
}

TEST_CASE("the embedding adds the token row and the position row, and its backward scatters") {
  const size_t B = 2, T = 3, C = 4, V = 5;
  const std::vector<int32_t> tokens = {1, 4, 1, 0, 1, 4};  // (B, T), repeats on purpose
  std::vector<float> wte = random_vector(V * C, 1), wpe = random_vector(T * C, 2);
  std::vector<float> out(B * T * C);
  embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  CHECK(out[(1 * T + 2) * C + 3] == wte[4 * C + 3] + wpe[2 * C + 3]);
  CHECK(out[(0 * T + 0) * C + 1] == wte[1 * C + 1] + wpe[0 * C + 1]);

  const std::vector<float> w = random_vector(out.size(), 3);
  std::vector<float> dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
  embedding_backward(dwte.data(), dwpe.data(), w.data(), tokens.data(), B, T, C);
  const auto loss = [&] {
    embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return weighted_sum(out, w);
  };
  CHECK(count_gradient_mismatches(wte, dwte, loss) == 0);
  CHECK(count_gradient_mismatches(wpe, dwpe, loss) == 0);
  // Token 1 appears three times: its row collects all three; token 2 never appears.
  CHECK(dwte[1 * C] == doctest::Approx(w[0] + w[2 * C] + w[4 * C]));
  CHECK(dwte[2 * C] == 0.0f);
  // Accumulates: a second call doubles the gradient.
  const std::vector<float> once = dwpe;
  embedding_backward(dwte.data(), dwpe.data(), w.data(), tokens.data(), B, T, C);
  for (size_t i = 0; i < once.size(); ++i) CHECK(dwpe[i] == doctest::Approx(2.0 * once[i]));
}

TEST_CASE("layernorm outputs have mean 0 and variance 1 per row, and its backward is exact") {
  const size_t N = 6, C = 24;
  std::vector<float> x = random_vector(N * C, 4, 3.0f);
  for (size_t c = 0; c < C; ++c) x[c] += 100.0f;  // a large offset must not hurt row 0
  std::vector<float> w(C, 1.0f), b(C, 0.0f), out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  for (size_t r = 0; r < N; ++r) {
    double m = 0, v = 0;
    for (size_t c = 0; c < C; ++c) m += out[r * C + c];
    m /= C;
    for (size_t c = 0; c < C; ++c) v += (out[r * C + c] - m) * (out[r * C + c] - m);
    CHECK(std::abs(m) < 1e-5);
    CHECK(v / C == doctest::Approx(1.0).epsilon(1e-4));  // 1 - eps / var, var ~ 9
  }

  w = random_vector(C, 5);
  b = random_vector(C, 6);
  const std::vector<float> dout = random_vector(N * C, 7);
  std::vector<float> dx(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  const auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return weighted_sum(out, dout);
  };
  CHECK(count_gradient_mismatches(x, dx, loss) == 0);
  CHECK(count_gradient_mismatches(w, dw, loss) == 0);
  CHECK(count_gradient_mismatches(b, db, loss) == 0);
}

TEST_CASE("matmul computes x W^T + b across block edges, and its backward is exact") {
  // 300 rows and 70 outputs: whole and partial 128-row and 64-row blocks.
  const size_t N = 300, C = 9, OC = 70;
  std::vector<float> x = random_vector(N * C, 8), W = random_vector(OC * C, 9),
                     b = random_vector(OC, 10), out(N * OC);
  matmul_forward(out.data(), x.data(), W.data(), b.data(), N, C, OC);
  double worst = 0.0;
  for (size_t r = 0; r < N; ++r)
    for (size_t o = 0; o < OC; ++o) {
      double ref = b[o];
      for (size_t c = 0; c < C; ++c) ref += double(x[r * C + c]) * W[o * C + c];
      worst = std::max(worst, std::abs(out[r * OC + o] - ref));
    }
  CHECK(worst < 1e-5);

  const std::vector<float> dout = random_vector(N * OC, 11);
  std::vector<float> dx(N * C, 7.0f), dW(OC * C, 0.0f), db(OC, 0.0f);
  matmul_backward(dx.data(), dW.data(), db.data(), dout.data(), x.data(), W.data(), N, C, OC);
  const auto loss = [&] {
    matmul_forward(out.data(), x.data(), W.data(), b.data(), N, C, OC);
    return weighted_sum(out, dout);
  };
  CHECK(count_gradient_mismatches(W, dW, loss) == 0);
  CHECK(count_gradient_mismatches(b, db, loss) == 0);
  std::vector<float> x_head(x.begin(), x.begin() + 40 * C);  // dx is overwritten (not 7 + ...)
  const auto loss_head = [&] {
    std::copy(x_head.begin(), x_head.end(), x.begin());
    return loss();
  };
  CHECK(count_gradient_mismatches(x_head, std::vector<float>(dx.begin(), dx.begin() + 40 * C),
                                  loss_head) == 0);
}

TEST_CASE("causal attention: rows of P sum to 1, the future is invisible, the backward is exact") {
  const size_t B = 2, T = 5, C = 8, NH = 2;
  std::vector<float> qkv = random_vector(B * T * 3 * C, 12), out(B * T * C), att(B * NH * T * T);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  for (size_t row = 0; row < B * NH * T; ++row) {
    const size_t t = row % T;
    double sum = 0;
    for (size_t s = 0; s < T; ++s) sum += att[row * T + s];
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-6));
    for (size_t s = t + 1; s < T; ++s) CHECK(att[row * T + s] == 0.0f);
  }
  // Position 0 attends only to itself: its output is its own v.
  for (size_t c = 0; c < C; ++c) CHECK(out[c] == doctest::Approx(qkv[2 * C + c]).epsilon(1e-6));

  const std::vector<float> dout = random_vector(out.size(), 13);
  std::vector<float> dqkv(qkv.size(), 5.0f), datt(att.size());
  attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  const auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return weighted_sum(out, dout);
  };
  CHECK(count_gradient_mismatches(qkv, dqkv, loss) == 0);
}

TEST_CASE("attention over 1024 positions with huge logits stays finite and causal") {
  const size_t B = 1, T = 1024, C = 16, NH = 2;
  std::vector<float> qkv = random_vector(B * T * 3 * C, 14, 30.0f);  // |S| up to ~1e4
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  const std::vector<float> before = out;
  bool finite = true;
  for (float v : out) finite = finite && std::isfinite(v);
  CHECK(finite);
  // Changing the tokens after t = 600 (their q, k and v) leaves outputs 0..600 unchanged.
  for (size_t i = 601 * 3 * C; i < qkv.size(); ++i) qkv[i] = -qkv[i] * 2.0f;
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  CHECK(std::equal(out.begin(), out.begin() + 601 * C, before.begin()));
  CHECK_FALSE(std::equal(out.begin() + 601 * C, out.end(), before.begin() + 601 * C));

  std::vector<float> dqkv(qkv.size()), datt(att.size());
  const std::vector<float> dout = random_vector(out.size(), 15);
  attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  for (float v : dqkv) finite = finite && std::isfinite(v);
  CHECK(finite);
}

TEST_CASE("gelu matches its tanh formula and its backward is exact") {
  std::vector<float> x = random_vector(200, 16, 3.0f), out(200);
  x[0] = 0.0f;
  x[1] = 30.0f;
  x[2] = -30.0f;
  gelu_forward(out.data(), x.data(), x.size());
  CHECK(out[0] == 0.0f);
  CHECK(out[1] == 30.0f);
  CHECK(std::abs(out[2]) < 1e-6f);
  for (size_t i = 0; i < x.size(); ++i) {
    const double xd = x[i];
    const double ref =
        0.5 * xd * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (xd + 0.044715 * xd * xd * xd)));
    CHECK(std::abs(out[i] - ref) < 1e-6 * std::max(1.0, std::abs(ref)));
  }
  const std::vector<float> dout = random_vector(x.size(), 17);
  std::vector<float> dx = dout;
  gelu_backward(dx.data(), x.data(), dx.data(), x.size());  // in place over dout
  const auto loss = [&] {
    gelu_forward(out.data(), x.data(), x.size());
    return weighted_sum(out, dout);
  };
  CHECK(count_gradient_mismatches(x, dx, loss, 1e-3f) == 0);
}

TEST_CASE("the residual adds, and its backward passes the gradient into both branches") {
  const std::vector<float> a = {1, 2, 3}, b = {10, 20, 30}, dout = {0.5f, -1, 2};
  std::vector<float> out(3), da = {1, 1, 1}, db(3, 0.0f);
  residual_forward(out.data(), a.data(), b.data(), 3);
  CHECK(out == std::vector<float>{11, 22, 33});
  residual_backward(da.data(), db.data(), dout.data(), 3);
  CHECK(da == std::vector<float>{1.5f, 0, 3});
  CHECK(db == dout);
}

TEST_CASE("cross-entropy of uniform logits is log V, with gradient (1/V - onehot) dloss") {
  const size_t N = 4, V = 32;
  const std::vector<float> logits(N * V, 3.0f);
  const std::vector<int32_t> targets = {0, 5, 31, 7};
  std::vector<float> losses(N), dlogits(N * V);
  const CrossEntropyResult r =
      cross_entropy(losses.data(), dlogits.data(), logits.data(), targets.data(), N, V, 0.25f);
  CHECK(r.loss_sum == doctest::Approx(4.0 * std::log(32.0)).epsilon(1e-6));
  CHECK(r.correct == 1);  // the first maximum is index 0: only row 0's target
  CHECK(dlogits[1] == doctest::Approx(0.25 / 32));
  CHECK(dlogits[V + 5] == doctest::Approx(0.25 / 32 - 0.25));
}

TEST_CASE("cross-entropy's fused backward is exact, in place too, and huge logits are finite") {
  const size_t N = 3, V = 11;
  std::vector<float> logits = random_vector(N * V, 18, 2.0f), losses(N);
  const std::vector<int32_t> targets = {3, 0, 10};
  std::vector<float> dlogits = logits;  // in place
  cross_entropy(losses.data(), dlogits.data(), dlogits.data(), targets.data(), N, V, 1.0f);
  const auto loss = [&] {
    return cross_entropy(losses.data(), nullptr, logits.data(), targets.data(), N, V, 1.0f)
        .loss_sum;
  };
  CHECK(count_gradient_mismatches(logits, dlogits, loss, 1e-3f) == 0);

  std::vector<float> huge = {1e30f, -1e30f, 0.0f, 5e29f};
  const std::vector<int32_t> t = {0};
  const CrossEntropyResult r =
      cross_entropy(losses.data(), huge.data(), huge.data(), t.data(), 1, 4, 1.0f);
  CHECK(r.loss_sum == 0.0);
  CHECK(r.correct == 1);
  for (float v : huge) CHECK(std::isfinite(v));
}

TEST_CASE("set_threads refuses a count below 1") {
  CHECK_THROWS(set_threads(0));
  CHECK(threads() >= 1);
}

TEST_CASE("parallel_for runs every task exactly once, on 2 threads and nested") {
  set_threads(2);
  std::vector<int> runs(1000, 0), inner(64, 0);
  parallel_for(runs.size(), [&](size_t i) { runs[i] += 1; });
  parallel_for(8, [&](size_t i) {  // a nested loop runs inline on its task's thread
    parallel_for(8, [&](size_t j) { inner[i * 8 + j] += 1; });
  });
  set_threads(1);
  parallel_for(runs.size(), [&](size_t i) { runs[i] += 1; });
  CHECK(std::count(runs.begin(), runs.end(), 2) == 1000);
  CHECK(std::count(inner.begin(), inner.end(), 1) == 64);
}

// kernels/ops/threads.hpp: what training sets on its thread. Run on a thread of its own: the
// floating-point environment is per thread, and the other cases run with IEEE subnormals.
TEST_CASE(
    "flush_denormals: subnormal results and operands become zero, on the thread and on "
    "the threads it starts") {
  bool before = true, kept = false, flushed = false, result_zero = false, operand_zero = false,
       inherited = false;
  std::thread([&] {
    volatile float small = 1e-37f, subnormal = 1e-39f;
    before = flushing_denormals();
    kept = small * 0.01f != 0.0f && subnormal * 1e10f != 0.0f;  // IEEE: kept, and read
    flushed = flush_denormals();
    result_zero = small * 0.01f == 0.0f;       // FTZ: a subnormal result is zero
    operand_zero = subnormal * 1e10f == 0.0f;  // DAZ: a subnormal operand reads as zero
    std::thread([&] { inherited = flushing_denormals(); }).join();
  }).join();
  CHECK_FALSE(before);
  CHECK(kept);
  REQUIRE(flushed);
  CHECK(result_zero);
  CHECK(operand_zero);
  CHECK(inherited);
  CHECK_FALSE(flushing_denormals());  // this thread's environment is its own
}
