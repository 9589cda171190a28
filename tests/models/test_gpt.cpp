// The GPT language model on the CPU: its layout and presets, its initialisation, closed-form
// losses, the whole model's gradient against central finite differences, the readiness
// callbacks, accumulation, thread-count invariance, scratch reuse and bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "kernels/ops/threads.hpp"
#include "models/gpt.hpp"
#include "models/mlp.hpp"

using namespace geotrain;
using namespace geotrain::models;

namespace {

GptConfig small_config() { return GptConfig{32, 16, 2, 2, 8, 4}; }

std::vector<int32_t> random_tokens(const GptConfig& c, size_t batch, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> tokens(batch * (c.seq_len + 1));
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % c.vocab);
  return tokens;
}

BatchView view(const std::vector<int32_t>& tokens, size_t batch) {
  BatchView v;
  v.batch = batch;
  v.tokens = tokens.data();
  return v;
}

// Resets the ops to one thread whatever a test did.
struct ThreadsGuard {
  ~ThreadsGuard() { kernels::cpu::set_threads(1); }
};

}  // namespace

TEST_CASE("the presets have GPT-2's exact parameter counts") {
  CHECK(gpt_parameter_count(gpt_preset("gpt-tiny")) == 1'040'768);
  CHECK(gpt_parameter_count(gpt_preset("gpt-small")) == 19'177'472);
  CHECK(gpt_parameter_count(gpt_preset("gpt2-124m")) == 124'439'808);  // GPT-2 small
  CHECK(gpt_preset_names() == std::vector<std::string>{"gpt-tiny", "gpt-small", "gpt2-124m"});
  CHECK_THROWS_WITH_AS(gpt_preset("gpt-huge"), doctest::Contains("gpt-tiny"), InputError);
}

TEST_CASE("the tensors are named and ordered as gpt.hpp documents, in one flat table") {
  const Gpt model(small_config());
  const ParamTable table = model.make_table();
  const auto& t = table.tensors();
  REQUIRE(t.size() == 2 + 12 * 2 + 2);
  CHECK(t[0].name == "wte");
  CHECK(t[0].size == 32 * 16);
  CHECK(t[1].name == "wpe");
  CHECK(t[1].size == 8 * 16);
  CHECK(t[2].name == "h.0.ln_1.w");
  CHECK(t[4].name == "h.0.attn.qkv.w");
  CHECK(t[4].size == 3 * 16 * 16);
  CHECK(t[5].name == "h.0.attn.qkv.b");
  CHECK(t[10].name == "h.0.mlp.fc.w");
  CHECK(t[10].size == 64 * 16);
  CHECK(t[13].name == "h.0.mlp.proj.b");
  CHECK(t[14].name == "h.1.ln_1.w");
  CHECK(t[26].name == "ln_f.w");
  CHECK(t[27].name == "ln_f.b");
  CHECK(table.total_elements() == model.parameter_count());
  CHECK(model.parameter_count() == gpt_parameter_count(small_config()));
  CHECK(model.kind() == "gpt");
}

TEST_CASE(
    "init draws normal(0, 0.02), 0.02 / sqrt(2 layers) for residual projections, LN 1 and 0") {
  const Gpt model(gpt_preset("gpt-tiny"));
  ParamTable table = model.make_table();
  model.init(table.values(), 42);
  const auto moments = [&](const std::string& name) {
    const FloatSpan v = table.tensor(name);
    double m = 0, sq = 0;
    for (float x : v) m += x;
    m /= double(v.size());
    for (float x : v) sq += (x - m) * (x - m);
    return std::pair{m, std::sqrt(sq / double(v.size()))};
  };
  const auto [wte_mean, wte_std] = moments("wte");
  CHECK(std::abs(wte_mean) < 1e-3);
  CHECK(wte_std == doctest::Approx(0.02).epsilon(0.02));
  CHECK(moments("h.2.mlp.fc.w").second == doctest::Approx(0.02).epsilon(0.02));
  CHECK(moments("h.4.mlp.proj.w").second == doctest::Approx(0.02 / std::sqrt(10.0)).epsilon(0.02));
  CHECK(moments("h.0.attn.proj.w").second == doctest::Approx(0.02 / std::sqrt(10.0)).epsilon(0.03));
  for (float x : table.tensor("h.3.ln_2.w")) CHECK(x == 1.0f);
  for (float x : table.tensor("h.3.attn.qkv.b")) CHECK(x == 0.0f);
  for (float x : table.tensor("ln_f.b")) CHECK(x == 0.0f);

  std::vector<float> again(model.parameter_count()), other(model.parameter_count());
  model.init(again, 42);
  model.init(other, 43);
  CHECK(std::memcmp(again.data(), table.values().data(), again.size() * sizeof(float)) == 0);
  CHECK(again != other);
}

TEST_CASE("with zero weights every logit is 0 and the loss is exactly log V per prediction") {
  Gpt model(small_config());
  std::vector<float> params(model.parameter_count(), 0.0f), grad(params.size(), 0.0f);
  const std::vector<int32_t> tokens = random_tokens(small_config(), 3, 1);
  const BatchResult r = model.forward_backward(params, view(tokens, 3), grad);
  CHECK(r.predictions == 3 * 8);
  CHECK(r.mean_loss() == doctest::Approx(std::log(32.0)).epsilon(1e-6));
  CHECK(model.evaluate(params, view(tokens, 3)).loss_sum == r.loss_sum);
}

TEST_CASE("the whole model's gradient matches central finite differences on every parameter") {
  // Weights 3x the init's scale plus a uniform offset in [-0.05, 0.05) (biases and LayerNorm
  // included), so every block contributes well above rounding. Tolerance:
  // |analytic - numeric| <= 2e-4 + 2e-2 |numeric|, step 1e-3 on the batch-mean loss.
  const GptConfig c = small_config();
  Gpt model(c);
  std::vector<float> params(model.parameter_count()), grad(params.size(), 0.0f);
  model.init(params, 7);
  std::mt19937_64 rng(8);
  for (float& p : params) p = p * 3.0f + static_cast<float>(rng() % 1000) * 1e-4f - 0.05f;
  const std::vector<int32_t> tokens = random_tokens(c, 2, 9);
  model.forward_backward(params, view(tokens, 2), grad);
  const double n = 2.0 * double(c.seq_len);
  const float h = 1e-3f;
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const float saved = params[i];
    params[i] = saved + h;
    const double up = model.evaluate(params, view(tokens, 2)).loss_sum / n;
    params[i] = saved - h;
    const double down = model.evaluate(params, view(tokens, 2)).loss_sum / n;
    params[i] = saved;
    const double numeric = (up - down) / (2.0 * double(h));
    const double err = std::abs(grad[i] - numeric);
    worst = std::max(worst, err / (2e-4 + 2e-2 * std::abs(numeric)));
    if (err > 2e-4 + 2e-2 * std::abs(numeric)) {
      if (bad < 5) MESSAGE("parameter ", i, ": analytic ", grad[i], " numeric ", numeric);
      ++bad;
    }
  }
  MESSAGE("worst error / tolerance over ", params.size(), " parameters: ", worst);
  CHECK(bad == 0);
}

TEST_CASE("each tensor is reported ready once, when its gradient is final, wte last") {
  const GptConfig c = small_config();
  Gpt model(c);
  const auto specs = model.tensor_specs();
  std::vector<float> params(model.parameter_count()), grad(params.size(), 0.0f);
  model.init(params, 3);
  const std::vector<int32_t> tokens = random_tokens(c, 2, 4);
  std::vector<size_t> order;
  std::vector<std::vector<float>> at_ready(specs.size());
  std::vector<uint64_t> offset(specs.size(), 0);
  for (size_t i = 1; i < specs.size(); ++i) offset[i] = offset[i - 1] + specs[i - 1].size;
  model.forward_backward(params, view(tokens, 2), grad, [&](size_t tensor) {
    order.push_back(tensor);
    const float* g = grad.data() + offset[tensor];
    at_ready[tensor].assign(g, g + specs[tensor].size);
  });
  REQUIRE(order.size() == specs.size());
  CHECK(order.front() == specs.size() - 2);  // ln_f.w
  CHECK(order.back() == 0);                  // wte: the tied head's gradient ends in the embedding
  for (size_t i = 0; i < specs.size(); ++i) {
    CHECK(std::count(order.begin(), order.end(), i) == 1);
    CHECK(std::memcmp(at_ready[i].data(), grad.data() + offset[i], specs[i].size * sizeof(float)) ==
          0);
  }
}

TEST_CASE("gradients accumulate: two calls give twice the gradient of one") {
  const GptConfig c = small_config();
  Gpt model(c);
  std::vector<float> params(model.parameter_count()), once(params.size(), 0.0f);
  model.init(params, 5);
  const std::vector<int32_t> tokens = random_tokens(c, 2, 6);
  model.forward_backward(params, view(tokens, 2), once);
  std::vector<float> twice = once;
  model.forward_backward(params, view(tokens, 2), twice);
  double worst = 0, biggest = 0;
  for (size_t i = 0; i < once.size(); ++i) {
    worst = std::max(worst, double(std::abs(twice[i] - 2.0f * once[i])));
    biggest = std::max(biggest, double(std::abs(once[i])));
  }
  CHECK(biggest > 1e-3);
  CHECK(worst <= 1e-6 * biggest);
}

TEST_CASE("loss and gradient are bit-identical with 1 and 2 threads") {
  ThreadsGuard reset;
  // 3 x 100 = 300 rows: whole and partial row blocks; 4 heads x 3 sequences of attention tasks.
  const GptConfig c{96, 64, 2, 4, 100, 4};
  Gpt model(c);
  std::vector<float> params(model.parameter_count());
  model.init(params, 11);
  const std::vector<int32_t> tokens = random_tokens(c, 3, 12);
  std::vector<float> g1(params.size(), 0.0f), g2(params.size(), 0.0f);
  kernels::cpu::set_threads(1);
  const BatchResult r1 = model.forward_backward(params, view(tokens, 3), g1);
  kernels::cpu::set_threads(2);
  const BatchResult r2 = model.forward_backward(params, view(tokens, 3), g2);
  CHECK(r1.loss_sum == r2.loss_sum);
  CHECK(r1.correct == r2.correct);
  CHECK(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)) == 0);
}

TEST_CASE("scratch grown for a larger batch serves a smaller one with the same results") {
  const GptConfig c = small_config();
  Gpt fresh(c), reused(c);
  std::vector<float> params(fresh.parameter_count());
  fresh.init(params, 13);
  const std::vector<int32_t> big = random_tokens(c, 5, 14), small = random_tokens(c, 2, 15);
  std::vector<float> g_fresh(params.size(), 0.0f), g_reused(params.size(), 0.0f),
      scratch_grad(params.size(), 0.0f);
  reused.forward_backward(params, view(big, 5), scratch_grad);
  const BatchResult a = fresh.forward_backward(params, view(small, 2), g_fresh);
  const BatchResult b = reused.forward_backward(params, view(small, 2), g_reused);
  CHECK(a.loss_sum == b.loss_sum);
  CHECK(g_fresh == g_reused);
  CHECK(reused.evaluate(params, view(small, 2)).loss_sum == a.loss_sum);
}

TEST_CASE("bad input is an InputError naming the value, and the gradient is untouched") {
  const GptConfig c = small_config();
  Gpt model(c);
  std::vector<float> params(model.parameter_count()), grad(params.size(), 0.0f);
  model.init(params, 1);
  std::vector<int32_t> tokens = random_tokens(c, 2, 2);
  tokens[12] = 32;
  CHECK_THROWS_WITH_AS(model.forward_backward(params, view(tokens, 2), grad),
                       doctest::Contains("token 32 at row 1, position 3"), InputError);
  tokens[12] = -1;
  CHECK_THROWS_AS(model.evaluate(params, view(tokens, 2)), InputError);
  tokens[12] = 0;
  for (float g : grad) REQUIRE(g == 0.0f);
  std::vector<float> short_params(params.size() - 1);
  CHECK_THROWS_WITH_AS(model.evaluate(short_params, view(tokens, 2)),
                       doctest::Contains("params has"), InputError);
  std::vector<float> short_grad(params.size() + 1);
  CHECK_THROWS_WITH_AS(model.forward_backward(params, view(tokens, 2), short_grad),
                       doctest::Contains("grad has"), InputError);
  CHECK_THROWS_AS(model.evaluate(params, BatchView{2, nullptr, nullptr, nullptr}), InputError);
  CHECK_THROWS_AS(model.evaluate(params, view(tokens, 0)), InputError);
  CHECK_THROWS_AS(model.init(short_params, 1), InputError);

  CHECK_THROWS_WITH_AS(Gpt(GptConfig{32, 18, 2, 4, 8, 4}),
                       doctest::Contains("d_model 18 is not a multiple of heads 4"), InputError);
  CHECK_THROWS_WITH_AS(Gpt(GptConfig{32, 16, 0, 2, 8, 4}), doctest::Contains("layers"), InputError);
  CHECK_THROWS_WITH_AS(validate(GptConfig{0, 16, 2, 2, 8, 4}), doctest::Contains("vocab"),
                       InputError);
}

TEST_CASE("tensor shapes multiply out to the tensor sizes, weights (out, in), for GPT and MLP") {
  const geotrain::models::Gpt gpt(geotrain::models::gpt_preset("gpt-tiny"));
  const geotrain::models::Mlp mlp(geotrain::models::MlpConfig{784, {32}, 10});
  for (const geotrain::models::Model* m : {static_cast<const geotrain::models::Model*>(&gpt),
                                           static_cast<const geotrain::models::Model*>(&mlp)}) {
    const auto specs = m->tensor_specs();
    const auto shapes = m->tensor_shapes();
    REQUIRE(shapes.size() == specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      uint64_t n = 1;
      for (uint64_t s : shapes[i]) n *= s;
      CHECK_MESSAGE(n == specs[i].size, specs[i].name);
    }
  }
  const auto shapes = gpt.tensor_shapes();
  CHECK(shapes[0] == std::vector<uint64_t>{256, 128});      // wte
  CHECK(shapes[4] == std::vector<uint64_t>{3 * 128, 128});  // h.0.attn.qkv.w
  CHECK(shapes[10] == std::vector<uint64_t>{512, 128});     // h.0.mlp.fc.w
  CHECK(mlp.tensor_shapes()[0] == std::vector<uint64_t>{32, 784});
}
