// Local optimizer, schedule, clipping, accumulation and the anomaly guard, against closed-form
// values (PyTorch's update rules worked by hand).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "core/error.hpp"
#include "models/mlp.hpp"
#include "worker/training/anomaly_guard.hpp"
#include "worker/training/local_step.hpp"
#include "worker/training/optimizer.hpp"

using namespace geotrain;
using namespace geotrain::worker;

TEST_CASE("SGD with momentum 0.9 on a constant gradient follows the buffer 1, 1.9, 2.71") {
  Optimizer opt({.kind = OptimizerKind::kSgd, .momentum = 0.9f}, 1);
  std::vector<float> p{1.0f};
  const std::vector<float> g{1.0f};
  opt.step(p, g, 0.1f);
  CHECK(p[0] == doctest::Approx(0.9));
  opt.step(p, g, 0.1f);
  CHECK(p[0] == doctest::Approx(0.71));
  opt.step(p, g, 0.1f);
  CHECK(p[0] == doctest::Approx(0.439));
  CHECK(opt.steps() == 3);
}

TEST_CASE("SGD weight decay adds wd * p to the gradient; Nesterov looks one step ahead") {
  Optimizer plain({.kind = OptimizerKind::kSgd, .momentum = 0.0f, .weight_decay = 0.5f}, 1);
  std::vector<float> p{2.0f};
  plain.step(p, std::vector<float>{1.0f}, 0.1f);
  CHECK(p[0] == doctest::Approx(2.0 - 0.1 * (1.0 + 0.5 * 2.0)));
  Optimizer nesterov({.kind = OptimizerKind::kSgd, .momentum = 0.5f, .nesterov = true}, 1);
  std::vector<float> q{0.0f};
  nesterov.step(q, std::vector<float>{1.0f}, 1.0f);  // buf = 1, update = 1 + 0.5 * 1
  CHECK(q[0] == doctest::Approx(-1.5));
  nesterov.step(q, std::vector<float>{1.0f}, 1.0f);  // buf = 1.5, update = 1 + 0.75
  CHECK(q[0] == doctest::Approx(-3.25));
}

TEST_CASE("AdamW's bias-corrected first steps move each weight by lr * sign(g), after decay") {
  Optimizer opt({.kind = OptimizerKind::kAdamW, .weight_decay = 0.1f}, 2);
  std::vector<float> p{1.0f, -1.0f};
  const std::vector<float> g{0.5f, -2.0f};
  opt.step(p, g, 0.01f);
  // m_hat = g, v_hat = g^2: update = g / (|g| + eps) = sign(g).
  CHECK(p[0] == doctest::Approx(1.0 * (1 - 0.01 * 0.1) - 0.01).epsilon(1e-6));
  CHECK(p[1] == doctest::Approx(-1.0 * (1 - 0.01 * 0.1) + 0.01).epsilon(1e-6));
  const float p0 = p[0];
  opt.step(p, g, 0.01f);  // a constant gradient keeps m_hat = g, v_hat = g^2
  CHECK(p[0] == doctest::Approx(p0 * (1 - 0.001) - 0.01).epsilon(1e-6));
  CHECK_THROWS_AS(Optimizer({.kind = OptimizerKind::kAdamW, .beta2 = 1.0f}, 1), InputError);
  CHECK_THROWS_WITH_AS(parse_optimizer_kind("lamb"), doctest::Contains("'lamb'"), InputError);
}

TEST_CASE("the schedule warms up linearly, then holds or follows a cosine to min_lr") {
  LrSchedule s{.base_lr = 0.4f,
               .warmup_steps = 4,
               .total_steps = 14,
               .decay = LrDecay::kCosine,
               .min_lr = 0.0f};
  s.validate();
  CHECK(s.at(0) == doctest::Approx(0.1));
  CHECK(s.at(3) == doctest::Approx(0.4));
  CHECK(s.at(4) == doctest::Approx(0.4));
  CHECK(s.at(9) == doctest::Approx(0.2));  // halfway through the decay: cos(pi/2) = 0
  CHECK(s.at(14) == doctest::Approx(0.0));
  CHECK(s.at(100) == doctest::Approx(0.0));
  LrSchedule c{.base_lr = 0.1f, .reference_batch = 256, .global_batch = 1024};
  CHECK(c.at(0) == doctest::Approx(0.4));  // linear scaling by 1024 / 256
  CHECK(c.at(1000) == doctest::Approx(0.4));
  LrSchedule bad{.base_lr = 0.1f, .warmup_steps = 10, .total_steps = 10, .decay = LrDecay::kCosine};
  CHECK_THROWS_AS(bad.validate(), InputError);
}

TEST_CASE("cyclic: cosines with warm restarts after the warm-up, each cycle M times the last") {
  // Warm-up 2 steps, then cycles of 4, 8, 16 ... steps from 0.4 down towards 0.1.
  LrSchedule s{.base_lr = 0.4f,
               .warmup_steps = 2,
               .decay = LrDecay::kCyclic,
               .min_lr = 0.1f,
               .cycle_steps = 4,
               .cycle_mult = 2};
  s.validate();
  const auto cosine = [](double t) {
    return 0.1 + 0.3 * 0.5 * (1 + std::cos(std::numbers::pi * t));
  };
  CHECK(s.at(0) == doctest::Approx(0.2));  // warm-up
  CHECK(s.at(2) == doctest::Approx(0.4));  // cycle 0 (steps 2-5) starts at the peak
  CHECK(s.at(4) == doctest::Approx(cosine(2.0 / 4)));
  CHECK(s.at(5) == doctest::Approx(cosine(3.0 / 4)));
  CHECK(s.at(6) == doctest::Approx(0.4));  // restart: cycle 1 (steps 6-13, 8 long)
  CHECK(s.at(10) == doctest::Approx(cosine(4.0 / 8)));
  CHECK(s.at(13) == doctest::Approx(cosine(7.0 / 8)));
  CHECK(s.at(14) == doctest::Approx(0.4));  // cycle 2 (steps 14-29, 16 long)
  CHECK(s.at(29) == doctest::Approx(cosine(15.0 / 16)));
  // Step 2 + 4 (2^k - 1) starts cycle k; the 40th cycle's middle, without overflow or a slow loop.
  const uint64_t k40 = 2 + 4 * ((uint64_t{1} << 40) - 1);
  CHECK(s.at(k40) == doctest::Approx(0.4));
  CHECK(s.at(k40 + 2 * (uint64_t{1} << 40)) == doctest::Approx(cosine(0.5)));
  // Multiplier 1: every cycle 4 steps, in closed form at any step.
  LrSchedule even = s;
  even.cycle_mult = 1;
  CHECK(even.at(2 + 4 * 1000000000ull + 2) == doctest::Approx(cosine(0.5)));
  CHECK(even.at(2 + 4 * 7 + 3) == doctest::Approx(cosine(0.75)));
  LrSchedule bad = s;
  bad.cycle_steps = 0;
  CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("cycle of 0 steps"), InputError);
}

TEST_CASE("the peak scales with the global batch, linearly or by its square root") {
  LrSchedule linear{.base_lr = 0.1f, .reference_batch = 64, .global_batch = 256};
  CHECK(linear.peak_lr() == doctest::Approx(0.4));
  LrSchedule root = linear;
  root.scaling = LrScaling::kSqrt;
  CHECK(root.peak_lr() == doctest::Approx(0.2));  // sqrt(256 / 64) = 2
  CHECK(root.at(0) == doctest::Approx(0.2));
  root.global_batch = 16;
  CHECK(root.peak_lr() == doctest::Approx(0.05));  // sqrt(1/4): a smaller batch, a lower peak
}

TEST_CASE("global-norm clipping scales (3, 4) to norm 1 and leaves small gradients alone") {
  std::vector<float> g{3.0f, 0.0f, 4.0f};
  CHECK(clip_grad_norm(g, 1.0) == doctest::Approx(5.0));
  CHECK(g[0] == doctest::Approx(0.6).epsilon(1e-5));
  CHECK(g[2] == doctest::Approx(0.8).epsilon(1e-5));
  std::vector<float> small{0.3f, 0.4f};
  CHECK(clip_grad_norm(small, 1.0) == doctest::Approx(0.5));
  CHECK(small == std::vector<float>{0.3f, 0.4f});
}

TEST_CASE("the guard refuses non-finite gradients and losses beyond k sigma, and counts them") {
  AnomalyGuard guard({.window = 8, .k_sigma = 3.0, .min_samples = 4});
  const std::vector<float> ok{1.0f}, nan{std::numeric_limits<float>::quiet_NaN()};
  // Window 1.0, 1.1, 0.9, 1.0: mean 1.0, sample sigma sqrt(0.02 / 3) = 0.0816.
  for (double l : {1.0, 1.1, 0.9, 1.0}) CHECK(guard.check(0, l, ok) == Verdict::kAccept);
  CHECK(guard.check(1, 1.2, ok) == Verdict::kAccept);  // 2.4 sigma
  CHECK(guard.check(2, 5.0, ok) == Verdict::kLossSpike);
  CHECK(guard.check(3, 1.0, nan) == Verdict::kNonFiniteGradient);
  CHECK(guard.check(4, std::numeric_limits<double>::infinity(), ok) == Verdict::kNonFiniteLoss);
  CHECK(guard.skipped() == 3);
  CHECK(guard.check(5, 1.05, ok) == Verdict::kAccept);  // the spike did not enter the window
}

TEST_CASE("a loss that stays high is a new level: the guard applies it after a few spikes") {
  // A flat plateau makes the window tight (sigma ~0.0008 here); a merge of the global values
  // then lifts the loss by a little and for good. Refusing for ever would stall training.
  AnomalyGuard guard({.window = 8, .k_sigma = 6.0, .min_samples = 4, .max_consecutive_skips = 3});
  for (double l : {2.400, 2.401, 2.399, 2.400})
    REQUIRE(guard.check(0, l, true) == Verdict::kAccept);
  for (uint64_t s = 1; s <= 3; ++s) CHECK(guard.check(s, 2.45, true) == Verdict::kLossSpike);
  CHECK(guard.check(4, 2.45, true) == Verdict::kAccept);  // the 4th spike in a row: a new level
  CHECK(guard.skipped() == 3);
  CHECK(guard.losses() == std::vector<double>{2.45});  // the window starts again from it
  // The window refills before it judges again (min_samples), then judges around the new level.
  for (double l : {2.46, 2.44, 2.45}) CHECK(guard.check(5, l, true) == Verdict::kAccept);
  CHECK(guard.check(6, 9.0, true) == Verdict::kLossSpike);
  // A non-finite step is always refused and neither starts nor ends a streak.
  CHECK(guard.check(7, 1.0, false) == Verdict::kNonFiniteGradient);
  CHECK(guard.check(8, 9.0, true) == Verdict::kLossSpike);
  CHECK(guard.check(9, 2.45, true) == Verdict::kAccept);  // a good step ends the streak
  for (uint64_t s = 10; s <= 12; ++s) CHECK(guard.check(s, 9.0, true) == Verdict::kLossSpike);
}

TEST_CASE("with max_consecutive_skips 0 the guard refuses a raised loss for ever") {
  AnomalyGuard guard({.window = 8, .k_sigma = 6.0, .min_samples = 4, .max_consecutive_skips = 0});
  for (double l : {2.400, 2.401, 2.399, 2.400})
    REQUIRE(guard.check(0, l, true) == Verdict::kAccept);
  for (uint64_t s = 1; s <= 20; ++s) CHECK(guard.check(s, 2.45, true) == Verdict::kLossSpike);
  CHECK(guard.skipped() == 20);
}

TEST_CASE("a refused step leaves parameters and optimizer state untouched") {
  LocalStep step({.optimizer = {.kind = OptimizerKind::kSgd, .momentum = 0.9f},
                  .schedule = {.base_lr = 0.5f},
                  .guard = {.window = 4, .min_samples = 2},
                  .decay_mask = {}},
                 2);
  std::vector<float> p{1.0f, 2.0f};
  step.grad()[0] = std::numeric_limits<float>::infinity();
  REQUIRE(step.add_micro_batch(1.0));
  CHECK(step.apply(p).verdict == Verdict::kNonFiniteGradient);
  CHECK(p == std::vector<float>{1.0f, 2.0f});
  CHECK(step.skipped() == 1);
  // The next good step behaves as the optimizer's first (momentum buffer = gradient).
  step.grad()[0] = 1.0f;
  step.grad()[1] = -1.0f;
  REQUIRE(step.add_micro_batch(1.0));
  const StepReport r = step.apply(p);
  CHECK(r.verdict == Verdict::kAccept);
  CHECK(r.step == 1);
  CHECK(p[0] == doctest::Approx(0.5));
  CHECK(p[1] == doctest::Approx(2.5));
}

TEST_CASE("two accumulated micro-batches of 4 give the gradient of one batch of 8") {
  const models::MlpConfig config{6, {5}, 3};
  models::Mlp model(config);
  std::vector<float> params(model.parameter_count());
  model.init(params, 5);
  std::vector<float> x(8 * 6);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
  const std::vector<int32_t> y{0, 1, 2, 0, 1, 2, 2, 1};

  std::vector<float> full(params.size(), 0.0f);
  model.forward_backward(params, x.data(), y.data(), 8, full);
  std::vector<float> expected = params;
  for (size_t i = 0; i < params.size(); ++i) expected[i] -= 0.1f * full[i];

  LocalStep step({.optimizer = {.momentum = 0.0f},
                  .schedule = {.base_lr = 0.1f},
                  .accumulation_steps = 2,
                  .guard = {},
                  .decay_mask = {}},
                 params.size());
  const auto r1 = model.forward_backward(params, x.data(), y.data(), 4, step.grad());
  CHECK_FALSE(step.add_micro_batch(r1.loss_sum / 4));
  const auto r2 = model.forward_backward(params, x.data() + 4 * 6, y.data() + 4, 4, step.grad());
  CHECK(step.add_micro_batch(r2.loss_sum / 4));
  // As if a 2-worker AllReduce had summed two equal gradients: reduced_over = 2 halves it back.
  for (float& g : step.grad()) g *= 2.0f;
  const StepReport r = step.apply(params, 2);
  for (size_t i = 0; i < params.size(); ++i)
    CHECK(params[i] == doctest::Approx(expected[i]).epsilon(1e-5));
  CHECK(r.loss == doctest::Approx((r1.loss_sum + r2.loss_sum) / 8));
}

TEST_CASE("AdamW skips weight decay on the no_decay tensors: biases, LayerNorms, embeddings") {
  const ParamTable table({{"wte", 2},
                          {"h.0.ln_1.w", 1},
                          {"h.0.attn.qkv.w", 2},
                          {"h.0.attn.qkv.b", 1},
                          {"fc1.weight", 1},
                          {"fc1.bias", 1}},
                         {});
  const auto mask = weight_decay_mask(table, OptimizerConfig::default_no_decay());
  CHECK(mask == std::vector<uint8_t>{0, 0, 0, 1, 1, 0, 1, 0});
  CHECK(weight_decay_mask(table, {}) == std::vector<uint8_t>(8, 1));

  // With a zero gradient AdamW moves only by decay: p *= 1 - lr wd where the mask says so.
  OptimizerConfig config{.kind = OptimizerKind::kAdamW, .weight_decay = 0.5f};
  Optimizer opt(config, 8, mask);
  std::vector<float> p(8, 1.0f), g(8, 0.0f);
  opt.step(p, g, 0.1f);
  for (size_t i = 0; i < p.size(); ++i) CHECK(p[i] == (mask[i] ? 0.95f : 1.0f));
  CHECK_THROWS_AS(Optimizer(config, 7, mask), InputError);  // a mask of another size
}

TEST_CASE(
    "decide() takes apply()'s decisions from a device gradient's norm: average, clip, guard") {
  // Two workers' summed gradient (6, 8) over 2 micro-batches: the mean is (1.5, 2), norm 2.5,
  // clipped to 1 by max_grad_norm = 1 -> the device scales the sum by 1 / (2 * 2) * 1 / 2.5.
  const LocalStepConfig config{.optimizer = {.kind = OptimizerKind::kAdamW},
                               .schedule = {.base_lr = 0.1f},
                               .accumulation_steps = 2,
                               .max_grad_norm = 1.0,
                               .guard = {.window = 4, .min_samples = 2},
                               .decay_mask = {}};
  LocalStep host(config, 2), device(config, 2);
  std::vector<float> p{0.0f, 0.0f};
  host.grad()[0] = 6.0f;
  host.grad()[1] = 8.0f;
  host.add_micro_batch(1.0);
  host.add_micro_batch(1.0);
  device.add_micro_batch(1.0);
  device.add_micro_batch(1.0);
  const StepReport a = host.apply(p, 2);
  float scale = 0;
  const StepReport b = device.decide(6.0 * 6.0 + 8.0 * 8.0, 2, &scale);
  CHECK(b.verdict == a.verdict);
  CHECK(b.grad_norm == doctest::Approx(a.grad_norm));
  CHECK(b.grad_norm == doctest::Approx(2.5));
  CHECK(scale == doctest::Approx(1.0 / 4.0 / (2.5 + 1e-6)));
  CHECK(b.lr == a.lr);
  CHECK(device.optimizer().steps() == host.optimizer().steps());

  // A non-finite norm is a non-finite gradient: refused, counted, the optimizer does not step.
  device.add_micro_batch(1.0);
  device.add_micro_batch(1.0);
  const StepReport c = device.decide(std::numeric_limits<double>::infinity(), 2, &scale);
  CHECK(c.verdict == Verdict::kNonFiniteGradient);
  CHECK(scale == 0.0f);
  CHECK(device.skipped() == 1);
  CHECK(device.optimizer().steps() == 1);
  CHECK(device.steps() == 2);
}
