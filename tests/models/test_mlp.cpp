// Models on the CPU: layout in a ParamTable, closed-form kernel values, and gradients against
// central finite differences.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "kernels/model_cpu.hpp"
#include "models/mlp.hpp"

using namespace geotrain;
using namespace geotrain::models;

namespace {

struct Problem {
  std::vector<float> x;    // (B, inputs)
  std::vector<int32_t> y;  // (B)
};

Problem random_problem(const MlpConfig& c, size_t batch, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Problem p;
  p.x.resize(batch * c.inputs);
  for (float& v : p.x) v = n(rng);
  for (size_t i = 0; i < batch; ++i) p.y.push_back(static_cast<int32_t>(i % c.classes));
  return p;
}

// Largest |analytic - numeric| / max(1, |numeric|) over every parameter, with central
// differences of step h on the batch-mean loss.
double max_gradient_error(const MlpConfig& config, size_t batch, uint64_t seed, float h) {
  Mlp model(config);
  std::vector<float> params(model.parameter_count());
  model.init(params, seed);
  // Larger weights than the default init, so the loss is far from flat.
  for (float& p : params) p *= 3.0f;
  const Problem prob = random_problem(config, batch, seed + 1);
  std::vector<float> grad(params.size(), 0.0f);
  model.forward_backward(params, prob.x.data(), prob.y.data(), batch, grad);
  double worst = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const float saved = params[i];
    params[i] = saved + h;
    const double up = model.evaluate(params, prob.x.data(), prob.y.data(), batch).loss_sum;
    params[i] = saved - h;
    const double down = model.evaluate(params, prob.x.data(), prob.y.data(), batch).loss_sum;
    params[i] = saved;
    const double numeric = (up - down) / (2.0 * h) / static_cast<double>(batch);
    worst = std::max(worst, std::abs(grad[i] - numeric) / std::max(1.0, std::abs(numeric)));
  }
  return worst;
}

}  // namespace

TEST_CASE("the default MLP is 784-256-128-10 with named tensors in one flat table") {
  Mlp model(MlpConfig{});
  CHECK(model.parameter_count() == 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  const ParamTable table = model.make_table({"*.weight"});
  REQUIRE(table.tensors().size() == 6);
  CHECK(table.tensors()[0].name == "fc1.weight");
  CHECK(table.tensors()[0].size == 784 * 256);
  CHECK(table.tensors()[0].critical);
  CHECK(table.tensors()[3].name == "fc2.bias");
  CHECK(table.tensors()[3].offset == model.layers()[1].bias_offset);
  CHECK_FALSE(table.tensors()[3].critical);
  CHECK(table.total_elements() == model.parameter_count());
}

TEST_CASE("model specs parse, and bad ones are InputErrors naming the part") {
  const MlpConfig c = parse_mlp_config("784-64-32-10");
  CHECK(c.inputs == 784);
  CHECK(c.hidden == std::vector<size_t>{64, 32});
  CHECK(c.classes == 10);
  CHECK(parse_mlp_config("softmax").hidden.empty());
  CHECK_THROWS_WITH_AS(parse_mlp_config("784-x-10"), doctest::Contains("'x'"), InputError);
  CHECK_THROWS_AS(parse_mlp_config("784"), InputError);
  CHECK_THROWS_AS(parse_mlp_config("784-0-10"), InputError);
}

TEST_CASE("softmax cross-entropy of equal logits is log C with gradient (1/C - onehot)/B") {
  const size_t B = 2, C = 4;
  std::vector<float> logits(B * C, 0.5f), d(B * C);
  std::vector<int32_t> labels{1, 3};
  size_t correct = 99;
  const double loss =
      kernels::cpu::softmax_cross_entropy(logits.data(), labels.data(), B, C, d.data(), &correct);
  CHECK(loss == doctest::Approx(2.0 * std::log(4.0)).epsilon(1e-6));
  CHECK(correct == 0);  // ties go to the first class, which is no row's label
  CHECK(d[0] == doctest::Approx((0.25 - 0.0) / 2));
  CHECK(d[1] == doctest::Approx((0.25 - 1.0) / 2));
  CHECK(d[7] == doctest::Approx((0.25 - 1.0) / 2));
}

TEST_CASE("a linear layer computes x W^T + b and its gradients in closed form") {
  // x (2, 3), W (2, 3), b (2)
  const std::vector<float> x{1, 2, 3, 4, 5, 6}, w{1, 0, -1, 2, 1, 0}, b{0.5f, -1};
  std::vector<float> y(4);
  kernels::cpu::linear_forward(x.data(), w.data(), b.data(), 2, 3, 2, y.data());
  CHECK(y == std::vector<float>{-1.5f, 3, -1.5f, 12});
  const std::vector<float> dy{1, 0, 0, 1};
  std::vector<float> dw(6, 1.0f), db(2, 0.0f), dx(6);
  kernels::cpu::linear_backward(x.data(), w.data(), dy.data(), 2, 3, 2, dw.data(), db.data(),
                                dx.data());
  CHECK(dw == std::vector<float>{2, 3, 4, 5, 6, 7});  // accumulated onto 1
  CHECK(db == std::vector<float>{1, 1});
  CHECK(dx == std::vector<float>{1, 0, -1, 2, 1, 0});
}

TEST_CASE("softmax regression gradients match central finite differences") {
  // Smooth everywhere, so the only error is float rounding in the loss: h = 1e-2 keeps it
  // near 1e-5 and the O(h^2) truncation below 1e-4.
  CHECK(max_gradient_error(softmax_regression_config(7, 3), 5, 42, 1e-2f) < 2e-3);
}

TEST_CASE("MLP gradients match central finite differences") {
  // ReLU kinks: with random inputs no pre-activation falls within h of 0 for these seeds; a
  // wrong transposition, bias sum or 1/B factor gives errors of order 0.1 to 1.
  CHECK(max_gradient_error(MlpConfig{6, {5, 4}, 3}, 4, 7, 1e-2f) < 2e-3);
  CHECK(max_gradient_error(MlpConfig{9, {8}, 4}, 6, 11, 1e-2f) < 2e-3);
}

TEST_CASE("backward accumulates: two calls give twice the gradient of one") {
  const MlpConfig config{5, {4}, 3};
  Mlp model(config);
  std::vector<float> params(model.parameter_count());
  model.init(params, 3);
  const Problem p = random_problem(config, 4, 9);
  std::vector<float> once(params.size(), 0.0f), twice(params.size(), 0.0f);
  const BatchResult r = model.forward_backward(params, p.x.data(), p.y.data(), 4, once);
  model.forward_backward(params, p.x.data(), p.y.data(), 4, twice);
  model.forward_backward(params, p.x.data(), p.y.data(), 4, twice);
  for (size_t i = 0; i < once.size(); ++i) CHECK(twice[i] == doctest::Approx(2 * once[i]));
  CHECK(r.loss_sum > 0);
  std::vector<int32_t> bad = p.y;
  bad[2] = 3;
  CHECK_THROWS_WITH_AS(model.forward_backward(params, p.x.data(), bad.data(), 4, once),
                       doctest::Contains("label 3 at row 2"), InputError);
}
