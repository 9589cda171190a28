#include "bench/train_bench.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "bench/codec_bench.hpp"
#include "core/error.hpp"
#include "kernels/ops/threads.hpp"
#include "models/gpt.hpp"
#include "models/mlp.hpp"
#include "models/model_spec.hpp"
#include "worker/backend/backend_factory.hpp"
#include "worker/backend/model_backend.hpp"
#include "worker/training/local_step.hpp"
#include "worker/training/optimizer.hpp"
#ifdef GEOTRAIN_BENCH_HAS_CUDA
#include "worker/backend/cuda_model_backend.hpp"
#endif

namespace geotrain::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

bool is_gpt_preset(const std::string& name) {
  const auto names = models::gpt_preset_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Dense peaks from NVIDIA's data sheets (TFLOP/s, without sparsity): bf16 on tensor cores, and
// plain fp32 (the fp32 path does not use TF32). 0 for a device not listed.
double peak_tflops(const std::string& name, const std::string& precision) {
  const bool bf16 = precision == "bf16";
  if (name.find("H200") != std::string::npos) return bf16 ? 989.4 : 66.9;
  if (name.find("H100") != std::string::npos) {
    if (name.find("PCIe") != std::string::npos) return bf16 ? 756.0 : 51.2;
    return bf16 ? 989.4 : 66.9;  // SXM
  }
  if (name.find("A100") != std::string::npos) return bf16 ? 312.0 : 19.5;
  return 0;
}

}  // namespace

namespace {

// The model under test and one batch of random inputs for it, from a fixed seed.
struct BenchModel {
  std::unique_ptr<models::Model> model;
  std::vector<int32_t> tokens, labels;  // (B, T + 1) or (B)
  std::vector<float> x;                 // (B, inputs)
  models::BatchView view;
};

// Builds the model `o.model` names (a GPT preset or an MLP spec) and its batch; sets the result's
// kind and seq_len.
BenchModel make_bench_model(const TrainBenchOptions& o, TrainBenchResult& r) {
  BenchModel m;
  std::mt19937_64 rng(1);
  m.view.batch = o.batch;
  if (is_gpt_preset(o.model)) {
    models::GptConfig c = models::gpt_preset(o.model);
    if (o.seq_len > 0) c.seq_len = o.seq_len;
    m.model = std::make_unique<models::Gpt>(c);
    r.kind = "gpt";
    r.seq_len = static_cast<uint32_t>(c.seq_len);
    m.tokens.resize(size_t{o.batch} * (c.seq_len + 1));
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(c.vocab) - 1);
    for (auto& t : m.tokens) t = token(rng);
    m.view.tokens = m.tokens.data();
    return m;
  }
  GT_REQUIRE(o.seq_len == 0, "bench train: --seq-len is for a GPT preset, not MLP '{}'", o.model);
  models::MlpConfig c;
  try {
    c = models::parse_mlp_config(o.model);
  } catch (const InputError& e) {
    std::string presets;
    for (const auto& n : models::gpt_preset_names()) presets += n + ", ";
    GT_REQUIRE(false, "bench train: --model '{}' is neither a GPT preset ({}) nor an MLP: {}",
               o.model, presets.substr(0, presets.size() - 2), e.what());
  }
  m.model = std::make_unique<models::Mlp>(c);
  r.kind = "mlp";
  r.seq_len = 1;
  m.x.resize(size_t{o.batch} * c.inputs);
  m.labels.resize(o.batch);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(c.classes) - 1);
  for (auto& v : m.x) v = normal(rng);
  for (auto& l : m.labels) l = label(rng);
  m.view.x = m.x.data();
  m.view.labels = m.labels.data();
  return m;
}

// GPT: 6 N + 12 L T d with N = parameters less the position embedding; MLP: 6 N per sample.
double model_flops_per_token(const models::Model& model, const std::string& kind,
                             uint64_t parameters) {
  if (kind != "gpt") return 6.0 * static_cast<double>(parameters);
  const auto& c = static_cast<const models::Gpt&>(model).config();
  const double n = static_cast<double>(parameters - c.seq_len * c.d_model);  // less wpe
  return 6 * n + 12.0 * double(c.layers) * double(c.seq_len) * double(c.d_model);
}

// Seconds in forward + backward and in the optimizer, summed over the timed steps.
struct StepTimes {
  double forward_backward = 0;
  double optimizer = 0;
};

// Runs warmup + timed steps; `step(i)` returns {forward + backward s, optimizer s} of step i.
template <typename Step>
StepTimes time_steps(const TrainBenchOptions& o, Step&& step) {
  StepTimes t;
  for (int i = 0; i < o.warmup_steps + o.steps; ++i) {
    const auto [fb, opt] = step(i);
    if (i < o.warmup_steps) continue;
    t.forward_backward += fb;
    t.optimizer += opt;
  }
  return t;
}

StepTimes time_cpu(const TrainBenchOptions& o, BenchModel& m, const worker::OptimizerConfig& oc,
                   const ParamTable& table, std::vector<float>& params, TrainBenchResult& r) {
  std::vector<float> grad(params.size());
  worker::Optimizer optimizer(oc, params.size(), worker::weight_decay_mask(table, oc.no_decay));
  return time_steps(o, [&](int) {
    const auto t0 = Clock::now();
    std::fill(grad.begin(), grad.end(), 0.0f);
    r.loss = m.model->forward_backward(params, m.view, grad).mean_loss();
    const double t_fb = seconds_since(t0);
    const auto t1 = Clock::now();
    optimizer.step(params, grad, 1e-4f);
    return std::pair{t_fb, seconds_since(t1)};
  });
}

#ifdef GEOTRAIN_BENCH_HAS_CUDA
// The worker's CUDA backend, device-resident, as the trainer drives it.
StepTimes time_cuda(const TrainBenchOptions& o, const BenchModel& m,
                    const worker::OptimizerConfig& oc, const ParamTable& table,
                    const std::vector<float>& params, TrainBenchResult& r) {
  models::ModelSpec spec;
  spec.kind = r.kind;
  if (r.kind == "gpt")
    spec.gpt = static_cast<const models::Gpt&>(*m.model).config();
  else
    spec.arch = o.model;
  const auto backend = worker::make_model_backend("cuda", spec, 0, o.precision);
  worker::ResidentTraining* resident = backend->resident();
  GT_ASSERT(resident != nullptr, "the CUDA backend is not resident");
  resident->prepare_optimizer(oc, worker::weight_decay_mask(table, oc.no_decay));
  resident->upload_parameters(params);
  worker::Batch batch;
  batch.size = o.batch;
  batch.tokens = m.tokens;
  batch.x = m.x;
  batch.y = m.labels;
  const StepTimes t = time_steps(o, [&](int step) {
    const auto t0 = Clock::now();
    r.loss = resident->accumulate(batch).mean_loss();  // returns once the device is done
    const double t_fb = seconds_since(t0);
    const auto t1 = Clock::now();
    const double norm_sq = resident->reduce_gradient_norm_sq();
    resident->apply_step({std::isfinite(norm_sq), 1e-4f, 1.0f, uint64_t(step) + 1});
    // The step's kernels finish in the next accumulate.
    return std::pair{t_fb, seconds_since(t1)};
  });
  r.device_name = worker::cuda_device_name(0);
  r.peak_tflops = peak_tflops(r.device_name, o.precision);
  return t;
}
#endif

}  // namespace

TrainBenchResult measure_train(const TrainBenchOptions& o) {
  GT_REQUIRE(o.device == "cpu" || o.device == "cuda", "bench train: --device '{}' (cpu, cuda)",
             o.device);
  GT_REQUIRE(o.precision == "fp32" || o.precision == "bf16",
             "bench train: --precision '{}' (fp32, bf16)", o.precision);
  GT_REQUIRE(o.batch >= 1 && o.steps >= 1 && o.warmup_steps >= 0 && o.threads >= 1,
             "bench train: batch {}, steps {}, warmup {}, threads {} must be positive", o.batch,
             o.steps, o.warmup_steps, o.threads);
  GT_REQUIRE(o.device == "cuda" || o.precision == "fp32",
             "bench train: --precision bf16 needs --device cuda");
#ifndef GEOTRAIN_BENCH_HAS_CUDA
  GT_REQUIRE(o.device == "cpu",
             "bench train --device cuda: this geotrain was built without CUDA and NCCL");
#endif
  kernels::cpu::set_threads(o.threads);
  TrainBenchResult r;
  r.model = o.model;
  r.batch = o.batch;
  r.threads = o.threads;
  r.steps = o.steps;
  r.device = o.device;
  r.precision = o.precision;

  BenchModel m = make_bench_model(o, r);
  const ParamTable table = m.model->make_table();
  std::vector<float> params(table.total_elements());
  m.model->init(params, 1);
  r.parameters = m.model->parameter_count();
  r.flops_per_token = model_flops_per_token(*m.model, r.kind, r.parameters);

  worker::OptimizerConfig oc;
  oc.kind = worker::OptimizerKind::kAdamW;
  oc.weight_decay = 0.1f;
  StepTimes t;
  if (o.device == "cuda") {
#ifdef GEOTRAIN_BENCH_HAS_CUDA
    t = time_cuda(o, m, oc, table, params, r);
#endif
  } else {
    r.device_name = cpu_name();
    t = time_cpu(o, m, oc, table, params, r);
  }
  const double seconds = t.forward_backward + t.optimizer;
  r.tokens_per_s = double(o.batch) * r.seq_len * o.steps / seconds;  // tokens (samples)
  r.step_ms = 1e3 * seconds / o.steps;
  r.forward_backward_ms = 1e3 * t.forward_backward / o.steps;
  r.optimizer_ms = 1e3 * t.optimizer / o.steps;
  r.gflops = r.flops_per_token * r.tokens_per_s / 1e9;
  if (r.peak_tflops > 0) r.mfu = r.gflops / (1e3 * r.peak_tflops);
  return r;
}

int run_train_bench(const TrainBenchOptions& options) {
  const TrainBenchResult r = measure_train(options);
  const bool gpt = r.kind == "gpt";
  const char* formula =
      gpt ? "6 N + 12 L T d per token, N = parameters less wpe" : "6 N per sample, N = parameters";
  if (options.json) {
    nlohmann::json doc = {{"model", r.model},
                          {"kind", r.kind},
                          {"batch", r.batch},
                          {"seq_len", r.seq_len},
                          {"threads", r.threads},
                          {"steps", r.steps},
                          {"warmup_steps", options.warmup_steps},
                          {"parameters", r.parameters},
                          {"flops_per_token", r.flops_per_token},
                          {"flops_formula", formula},
                          {"tokens_per_s", r.tokens_per_s},
                          {"step_ms", r.step_ms},
                          {"forward_backward_ms", r.forward_backward_ms},
                          {"optimizer_ms", r.optimizer_ms},
                          {"gflops", r.gflops},
                          {"loss", r.loss},
                          {"optimizer", "adamw"},
                          {"device", r.device_name},
                          {"device_kind", r.device},
                          {"precision", r.precision},
                          {"peak_tflops", r.peak_tflops},
                          {"mfu", r.mfu}};
    std::printf("%s\n", doc.dump(2).c_str());
    return 0;
  }
  const char* unit = gpt ? "tokens" : "samples";
  std::printf("geotrain bench train: %s (%s, %llu parameters), batch %u%s, %s, %s %s\n",
              r.model.c_str(), r.kind.c_str(), static_cast<unsigned long long>(r.parameters),
              r.batch, gpt ? fmt::format(" x T {}", r.seq_len).c_str() : "",
              r.device == "cpu" ? fmt::format("{} threads", r.threads).c_str() : "cuda",
              r.device_name.c_str(), r.precision.c_str());
  std::printf("  %-22s %12.0f\n", fmt::format("{}/s", unit).c_str(), r.tokens_per_s);
  std::printf("  %-22s %12.2f\n", "step ms", r.step_ms);
  std::printf("  %-22s %12.2f  (%.0f%%)\n", "forward+backward ms", r.forward_backward_ms,
              100 * r.forward_backward_ms / r.step_ms);
  std::printf("  %-22s %12.2f  (%.0f%%)\n", "optimizer (AdamW) ms", r.optimizer_ms,
              100 * r.optimizer_ms / r.step_ms);
  std::printf("  %-22s %12.4g  (%s)\n",
              fmt::format("FLOPs per {}", gpt ? "token" : "sample").c_str(), r.flops_per_token,
              formula);
  std::printf("  %-22s %12.2f\n", "model GFLOP/s", r.gflops);
  if (r.peak_tflops > 0)
    std::printf("  %-22s %12.3f  (of %.1f TFLOP/s, the device's dense %s peak)\n", "MFU", r.mfu,
                r.peak_tflops, r.precision.c_str());
  std::printf("  mean of %d timed steps after %d warm-up steps; last loss %.4f\n", r.steps,
              options.warmup_steps, r.loss);
  return 0;
}

}  // namespace geotrain::bench
