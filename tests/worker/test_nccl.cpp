// GPU suite (labels worker, gpu): NcclCommunicator on device buffers and the CUDA model backend
// against the CPU backend. Ranks are threads of one process with the rendezvous over Gloo's
// in-memory HashStore (gloo's test style); closed-form sums. Two-rank cases need two devices
// (NCCL allows one rank per device) and say so when they cannot run.
// Tolerance for the backends: relative 1e-4 on the loss and on every gradient element (scaled by
// max(1e-3, |cpu|)), as in tests/models/test_mlp_cuda.cpp: fp32 both ways, different summation
// orders, default cuBLAS math (no TF32).
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "core/device_buffer.hpp"
#include "models/gpt.hpp"
#include "models/mlp.hpp"
#include "models/model_spec.hpp"
#include "ranks.hpp"
#include "worker/backend/cuda_model_backend.hpp"
#include "worker/backend/model_backend.hpp"
#include "worker/region/nccl_communicator.hpp"
#include "worker/training/local_step.hpp"

using namespace geotrain;
using namespace geotrain::worker;
using geotrain::DeviceBuffer;

namespace {

void run_ranks(int size, const std::function<void(NcclCommunicator&)>& body) {
  test::run_ranks<NcclCommunicator>(size, "nccl/test/", body);
}

std::vector<float> download(const DeviceBuffer<float>& d) {
  std::vector<float> h(d.size());
  d.download(h);
  return h;
}

Batch random_batch(const models::MlpConfig& config, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Batch b;
  b.size = n;
  b.x.resize(n * config.inputs);
  for (float& v : b.x) v = u(rng);
  b.y.resize(n);
  for (size_t i = 0; i < n; ++i) b.y[i] = static_cast<int32_t>((i * 7 + seed) % config.classes);
  return b;
}

models::ModelSpec mlp_spec(const models::MlpConfig& config) {
  models::ModelSpec spec;
  spec.kind = "mlp";
  spec.arch = std::to_string(config.inputs);
  for (size_t h : config.hidden) spec.arch += fmt::format("-{}", h);
  spec.arch += fmt::format("-{}", config.classes);
  return spec;
}

double worst_relative(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(double(got[i]) - double(want[i])) /
                                std::max(1e-3, std::abs(double(want[i]))));
  return worst;
}

}  // namespace

TEST_CASE(
    "one NCCL rank: allreduce of a device buffer leaves it unchanged, and so does broadcast") {
  run_ranks(1, [](NcclCommunicator& comm) {
    CHECK(comm.rank() == 0);
    CHECK(comm.size() == 1);
    std::vector<float> x(1000);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * static_cast<float>(i);
    DeviceBuffer<float> d(x.size());
    d.upload(x);
    comm.allreduce_sum({d.get(), d.size()});
    CHECK(download(d) == x);
    comm.broadcast({d.get(), d.size()}, 0);
    CHECK(download(d) == x);
  });
}

TEST_CASE(
    "two NCCL ranks as threads allreduce to the closed-form sum and broadcast the root's values") {
  if (cuda_device_count() < 2) {
    MESSAGE("fewer than 2 CUDA devices: the two-rank NCCL case cannot run here");
    return;
  }
  std::mutex mu;
  std::vector<std::vector<float>> sums(2), bcasts(2);
  run_ranks(2, [&](NcclCommunicator& comm) {
    const int r = comm.rank();
    std::vector<float> x(100000);  // several NCCL chunks
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<float>(r + 1) * static_cast<float>(i % 1000);
    DeviceBuffer<float> d(x.size());  // on comm.device(): the constructor made it current
    d.upload(x);
    comm.allreduce_sum({d.get(), d.size()});  // (1 + 2) (i mod 1000)
    std::vector<float> b(10, static_cast<float>(r));
    DeviceBuffer<float> db(b.size());
    db.upload(b);
    comm.broadcast({db.get(), db.size()}, 1);
    std::lock_guard lock(mu);
    sums[r] = download(d);
    bcasts[r] = download(db);
  });
  for (int r = 0; r < 2; ++r) {
    REQUIRE(sums[r].size() == 100000);
    for (size_t i = 0; i < sums[r].size(); i += 997)
      CHECK(sums[r][i] == static_cast<float>(3 * (i % 1000)));
    CHECK(bcasts[r] == std::vector<float>(10, 1.0f));
  }
}

TEST_CASE("the CUDA backend's loss and accumulated gradient match the CPU backend's within 1e-4") {
  for (const models::MlpConfig& config :
       {models::MlpConfig{}, models::MlpConfig{37, {33, 65}, 40}}) {
    models::Mlp layout(config);
    std::vector<float> params(layout.parameter_count());
    layout.init(params, 5);
    CpuModelBackend cpu(std::make_unique<models::Mlp>(config));
    auto gpu = make_cuda_model_backend(mlp_spec(config), 0);
    std::vector<float> grad_cpu(params.size(), 0.0f), grad_gpu(params.size(), 0.0f);
    for (uint64_t m = 0; m < 2; ++m) {  // two micro-batches accumulate
      const Batch batch = random_batch(config, m == 0 ? 64 : 17, m + 1);
      const auto rc = cpu.forward_backward(params, batch, grad_cpu);
      const auto rg = gpu->forward_backward(params, batch, grad_gpu);
      CHECK(rg.loss_sum == doctest::Approx(rc.loss_sum).epsilon(1e-4));
      CHECK(rg.correct == rc.correct);
    }
    cpu.reduce_gradient(grad_cpu);
    gpu->reduce_gradient(grad_gpu);
    CHECK(worst_relative(grad_gpu, grad_cpu) < 1e-4);

    // The device accumulator is zero again: the next step starts from nothing.
    const Batch batch = random_batch(config, 8, 9);
    std::vector<float> again_cpu(params.size(), 0.0f), again_gpu(params.size(), 0.0f);
    cpu.forward_backward(params, batch, again_cpu);
    gpu->forward_backward(params, batch, again_gpu);
    gpu->reduce_gradient(again_gpu);
    CHECK(worst_relative(again_gpu, again_cpu) < 1e-4);

    const auto ec = cpu.evaluate(params, view_of(batch));
    const auto eg = gpu->evaluate(params, view_of(batch));
    CHECK(eg.loss_sum == doctest::Approx(ec.loss_sum).epsilon(1e-4));
    CHECK(eg.correct == ec.correct);
  }
}

TEST_CASE(
    "a one-worker NCCL region: the host communicator round-trips and reduce_gradient equals the "
    "CPU's") {
  const models::MlpConfig config{784, {64}, 10};
  models::Mlp layout(config);
  std::vector<float> params(layout.parameter_count());
  layout.init(params, 7);
  gloo::rendezvous::HashStore store;
  auto gpu = make_cuda_model_backend(mlp_spec(config), 0);
  auto comm = gpu->connect_region(store, 0, 1, RegionOptions{});
  std::vector<float> host{1.0f, -2.0f, 3.5f};
  comm->allreduce_sum(host);
  CHECK(host == std::vector<float>{1.0f, -2.0f, 3.5f});
  comm->broadcast(host, 0);
  CHECK(host == std::vector<float>{1.0f, -2.0f, 3.5f});

  CpuModelBackend cpu(std::make_unique<models::Mlp>(config));
  const Batch batch = random_batch(config, 32, 3);
  std::vector<float> grad_cpu(params.size(), 0.0f), grad_gpu(params.size(), 0.0f);
  cpu.forward_backward(params, batch, grad_cpu);
  gpu->forward_backward(params, batch, grad_gpu);
  gpu->reduce_gradient(grad_gpu);  // NCCL AllReduce over one rank, in device memory
  CHECK(worst_relative(grad_gpu, grad_cpu) < 1e-4);
}

namespace {

LocalStepConfig adamw_steps(uint64_t total, const std::vector<uint8_t>& mask) {
  LocalStepConfig c;
  c.optimizer.kind = OptimizerKind::kAdamW;
  c.optimizer.weight_decay = 0.1f;
  c.schedule.base_lr = 3e-3f;
  c.schedule.warmup_steps = 2;
  c.schedule.total_steps = total;
  c.schedule.decay = LrDecay::kCosine;
  c.max_grad_norm = 0.5;  // small enough to clip
  c.decay_mask = mask;
  return c;
}

// `steps` optimizer steps two ways: the CPU backend with the host LocalStep, and the CUDA backend
// device-resident (LocalStep::decide + apply_step). Returns both final parameter vectors.
std::pair<std::vector<float>, std::vector<float>> train_both(
    const models::ModelSpec& spec, const LocalStepConfig& config,
    const std::function<Batch(uint64_t)>& batch_of, uint64_t steps, std::vector<double>* losses,
    const std::string& precision = "fp32") {
  const auto model = models::make_model(spec);
  std::vector<float> init(model->parameter_count());
  model->init(init, 11);
  CpuModelBackend cpu(models::make_model(spec));
  auto gpu = make_cuda_model_backend(spec, 0, precision);
  ResidentTraining* resident = gpu->resident();
  REQUIRE(resident != nullptr);
  resident->prepare_optimizer(config.optimizer, config.decay_mask);
  resident->upload_parameters(init);
  std::vector<float> host = init;
  LocalStep cpu_step(config, host.size()), gpu_step(config, host.size());
  for (uint64_t i = 0; i < steps; ++i) {
    const Batch batch = batch_of(i);
    const auto rc = cpu.forward_backward(host, batch, cpu_step.grad());
    cpu_step.add_micro_batch(rc.mean_loss());
    cpu.reduce_gradient(cpu_step.grad());
    const auto report_cpu = cpu_step.apply(host);
    const auto rg = resident->accumulate(batch);
    gpu_step.add_micro_batch(rg.mean_loss());
    float scale = 0;
    const auto report_gpu = gpu_step.decide(resident->reduce_gradient_norm_sq(), 1, &scale);
    resident->apply_step({report_gpu.verdict == Verdict::kAccept, report_gpu.lr, scale,
                          gpu_step.optimizer().steps()});
    CHECK(report_gpu.verdict == report_cpu.verdict);
    CHECK(report_gpu.grad_norm ==
          doctest::Approx(report_cpu.grad_norm).epsilon(precision == "bf16" ? 5e-2 : 1e-3));
    if (losses) losses->push_back(rg.mean_loss());
  }
  std::vector<float> device(host.size());
  resident->download_parameters(device);
  // The optimizer state comes back too (checkpoints read it), sized as the host optimizer's:
  // AdamW's two moments, SGD's momentum alone (worker/backend/step_engine.cpp does the same).
  const auto& opt = cpu_step.optimizer();
  std::vector<float> m(opt.first_moment().size()), v(opt.second_moment().size());
  resident->download_optimizer_state(m, v);
  REQUIRE(!m.empty());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    diff += std::pow(double(m[i]) - opt.first_moment()[i], 2);
    norm += std::pow(double(opt.first_moment()[i]), 2);
  }
  CHECK(norm > 0);
  CHECK(std::sqrt(diff / norm) < (precision == "bf16" ? 0.2 : 1e-3));
  if (!v.empty()) CHECK(std::any_of(v.begin(), v.end(), [](float x) { return x > 0; }));
  return {host, device};
}

}  // namespace

TEST_CASE("device-resident AdamW steps of the MLP end where the host optimizer ends (1e-4)") {
  const models::MlpConfig config{37, {33, 65}, 10};
  const auto spec = mlp_spec(config);
  const auto table = models::make_model(spec)->make_table();
  const auto cfg = adamw_steps(12, weight_decay_mask(table, OptimizerConfig::default_no_decay()));
  const auto [host, device] = train_both(
      spec, cfg, [&](uint64_t i) { return random_batch(config, 32, i + 1); }, 12, nullptr);
  CHECK(worst_relative(device, host) < 1e-4);
}

TEST_CASE("device-resident SGD with Nesterov momentum matches the host optimizer (1e-4)") {
  const models::MlpConfig config{37, {33}, 10};
  const auto spec = mlp_spec(config);
  LocalStepConfig cfg;
  cfg.optimizer.kind = OptimizerKind::kSgd;
  cfg.optimizer.momentum = 0.9f;
  cfg.optimizer.nesterov = true;
  cfg.optimizer.weight_decay = 1e-3f;
  cfg.schedule.base_lr = 0.05f;
  const auto [host, device] = train_both(
      spec, cfg, [&](uint64_t i) { return random_batch(config, 16, i + 7); }, 10, nullptr);
  CHECK(worst_relative(device, host) < 1e-4);
}

namespace {

models::ModelSpec small_gpt() {
  models::ModelSpec spec;
  spec.kind = "gpt";
  spec.gpt = models::GptConfig{100, 64, 2, 4, 32, 4};
  return spec;
}

Batch token_batch(const models::GptConfig& c, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Batch b;
  b.size = n;
  b.tokens.resize(n * (c.seq_len + 1));
  // A learnable stream: each token follows from the last (t -> 3 t + 1 mod V), with noise.
  for (size_t r = 0; r < n; ++r) {
    int32_t t = int32_t(rng() % c.vocab);
    for (size_t i = 0; i <= c.seq_len; ++i) {
      b.tokens[r * (c.seq_len + 1) + i] = t;
      t = rng() % 8 == 0 ? int32_t(rng() % c.vocab) : int32_t((3 * t + 1) % c.vocab);
    }
  }
  return b;
}

}  // namespace

TEST_CASE("device-resident GPT training in fp32 ends within 1e-3 of the CPU after 20 AdamW steps") {
  const auto spec = small_gpt();
  const auto table = models::make_model(spec)->make_table();
  const auto cfg = adamw_steps(20, weight_decay_mask(table, OptimizerConfig::default_no_decay()));
  std::vector<double> losses;
  const auto [host, device] = train_both(
      spec, cfg, [&](uint64_t i) { return token_batch(spec.gpt, 4, i + 1); }, 20, &losses);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < host.size(); ++i) {
    worst = std::max(worst, std::abs(double(device[i]) - host[i]));
    scale = std::max(scale, std::abs(double(host[i])));
  }
  CHECK(worst / scale < 1e-3);
  CHECK(losses.back() < losses.front());
}

TEST_CASE("device-resident GPT training in bf16 learns: the loss falls by a third in 40 steps") {
  const auto spec = small_gpt();
  const auto table = models::make_model(spec)->make_table();
  auto cfg = adamw_steps(40, weight_decay_mask(table, OptimizerConfig::default_no_decay()));
  cfg.max_grad_norm = 1.0;
  std::vector<double> losses;
  train_both(
      spec, cfg, [&](uint64_t i) { return token_batch(spec.gpt, 8, i + 1); }, 40, &losses, "bf16");
  REQUIRE(losses.size() == 40);
  CHECK(losses.back() < losses.front() * 2.0 / 3.0);
}

TEST_CASE("worker.precision bf16 is refused for an MLP on the GPU, naming the field") {
  CHECK_THROWS_WITH_AS(make_cuda_model_backend(mlp_spec(models::MlpConfig{}), 0, "bf16"),
                       doctest::Contains("worker.precision bf16"), InputError);
}

TEST_CASE("a GPT's gradient buckets queued during backward reduce to what one AllReduce gives") {
  // One rank (NCCL needs a GPU per rank): the sum is the rank's own gradient, so the bucketed
  // path must give the unbucketed one, here with buckets small enough to be many.
  const auto spec = small_gpt();
  const Batch batch = token_batch(spec.gpt, 4, 5);
  std::vector<float> init(models::make_model(spec)->parameter_count());
  models::make_model(spec)->init(init, 3);
  double norms[2] = {0, 0};
  std::vector<float> grads[2];
  for (int bucketed = 0; bucketed < 2; ++bucketed) {
    gloo::rendezvous::HashStore store;
    auto gpu = make_cuda_model_backend(spec, 0);
    RegionOptions options;
    options.bucket_cap_mb = bucketed ? 0.05 : 0;
    auto comm = gpu->connect_region(store, 0, 1, options);
    std::vector<float> grad(init.size(), 0.0f);
    gpu->forward_backward(init, batch, grad, /*last=*/true);
    gpu->reduce_gradient(grad);
    grads[bucketed] = grad;
    ResidentTraining* resident = gpu->resident();
    resident->accumulate(batch, true);
    norms[bucketed] = resident->reduce_gradient_norm_sq();
  }
  // Equal up to the order in which the backward's atomics land (LayerNorm, embedding).
  CHECK(worst_relative(grads[1], grads[0]) < 1e-5);
  CHECK(norms[1] == doctest::Approx(norms[0]).epsilon(1e-5));
  CHECK(norms[0] > 0);
}
