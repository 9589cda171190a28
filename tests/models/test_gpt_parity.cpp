// The correctness anchor of the GPT workload: geotrain's GPT, trained through the worker's own
// optimizer path (worker::LocalStep: clip, AdamW with the no-decay mask, or Muon for the block
// matrices with AdamW for the rest; warmup + cosine), follows an independent PyTorch
// implementation (scripts/torch_reference_gpt.py) step for step, from the same initial parameters
// (`geotrain export-init`) on the same byte windows (`geotrain dump-batches`).
//
// Tolerances (fp32 on both sides; the sums run in different orders, so bit equality is not
// expected, but 20 steps keep the drift far below these):
//   loss:       |loss_geotrain - loss_torch| / |loss_torch| <= 1e-4 at every step;
//   parameters: for every tensor, max_i |a_i - b_i| / max_i |b_i| <= 1e-3 after the last step
//               (a = geotrain, b = PyTorch).
// The largest parameter difference is in attn.qkv.b, and there only in its key part: the key
// bias gets no gradient in exact arithmetic (softmax is shift-invariant per query), so Adam
// turns rounding noise into its updates, in both implementations alike. Its values stay ~1e-6,
// and PyTorch against itself (1 vs 2 threads) already differs there by ~1.4e-4 of max|qkv.b|.
// Muon (the same tolerances): its Newton-Schulz runs in fp32 on both sides (OpenBLAS here,
// torch's GEMMs there), so the orthogonalised updates differ by rounding only.
// PyTorch is required: without python3 + torch the test fails (CI has them; bootstrap.sh
// installs them), it is never skipped.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kernels/ops/threads.hpp"
#include "models/model_spec.hpp"
#include "models/npy.hpp"
#include "models/safetensors.hpp"
#include "tests/run_binary.hpp"
#include "tests/temp_dir.hpp"
#include "worker/config.hpp"
#include "worker/data/text_corpus.hpp"
#include "worker/run/trainer.hpp"
#include "worker/training/local_step.hpp"
#include "worker/training/optimizer.hpp"

using namespace geotrain;

namespace {

constexpr int kSteps = 20;
constexpr double kLossTolerance = 1e-4;   // relative, every step
constexpr double kParamTolerance = 1e-3;  // max|a-b| / max|b|, every tensor, after kSteps

struct CommandOutput {
  int code;
  std::string text;
};

CommandOutput run_command(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 4096> buf;
  for (size_t got; (got = fread(buf.data(), 1, buf.size(), pipe)) > 0;) out.append(buf.data(), got);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// The first interpreter that imports torch: `python3` on PATH, else Debian's own (a pyenv or
// virtualenv python3 earlier on PATH may lack the python3-torch package). Empty when none does.
std::string python_with_torch() {
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    if (run_command(fmt::format("{} -c 'import torch, numpy'", python)).code == 0) return python;
  }
  return "";
}

// The parameters of a safetensors file, in the flat layout of `table` (names must match).
std::vector<float> load_into_layout(const models::SafetensorsFile& file, const ParamTable& table,
                                    const std::string& what) {
  std::vector<float> flat(table.total_elements());
  REQUIRE_MESSAGE(file.tensors.size() == table.tensors().size(), what, " has ", file.tensors.size(),
                  " tensors, the model ", table.tensors().size());
  for (const TensorInfo& t : table.tensors()) {
    const auto* s = file.find(t.name);
    REQUIRE_MESSAGE(s != nullptr, what, " has no tensor ", t.name);
    REQUIRE_MESSAGE(s->values.size() == t.size, what, ": ", t.name, " has ", s->values.size(),
                    " values, the model ", t.size);
    std::copy(s->values.begin(), s->values.end(),
              flat.begin() + static_cast<std::ptrdiff_t>(t.offset));
  }
  return flat;
}

// Trains `params` for kSteps on `batches` through the worker's LocalStep, configured as
// worker/run/trainer.cpp configures it; returns the loss of each step.
std::vector<double> train_here(const worker::WorkerConfig& config, models::Model& model,
                               const ParamTable& table, std::vector<float>& params,
                               const models::NpyInt32& batches) {
  const size_t batch = config.batch_size.of_rank(config.workers, 0), window = config.model.window();
  const auto lsc = worker::local_step_config(config, table, model, 1);  // the trainer's
  worker::LocalStep step(lsc, params.size());
  kernels::cpu::set_threads(1);  // ctest runs suites side by side; the ops give the same bits
  std::vector<double> losses;
  for (int j = 0; j < kSteps; ++j) {
    models::BatchView view;
    view.batch = batch;
    view.tokens = batches.values.data() + static_cast<size_t>(j) * batch * window;
    const auto result = model.forward_backward(params, view, step.grad());
    REQUIRE(step.add_micro_batch(result.mean_loss()));
    const auto report = step.apply(params);
    REQUIRE(report.verdict == worker::Verdict::kAccept);
    losses.push_back(report.loss);
  }

  return losses;
}

// The command line of scripts/torch_reference_gpt.py for the same init, batches and optimizer.
std::string torch_reference_command(const std::string& python, const worker::WorkerConfig& config,
                                    const std::filesystem::path& init_path,
                                    const std::filesystem::path& batches_path,
                                    const std::filesystem::path& torch_dir) {
  const auto& oc = config.optimizer;
  std::string globs;
  for (const auto& g : oc.no_decay) globs += " '" + g + "'";
  if (oc.kind == worker::OptimizerKind::kMuon) {
    globs += fmt::format(
        " --optimizer muon --muon-lr {} --muon-momentum {} --muon-nesterov {} --muon-ns-steps {} "
        "--adamw-tensors",
        oc.muon_lr, oc.muon_momentum, oc.muon_nesterov ? 1 : 0, oc.muon_ns_steps);
    for (const auto& g : oc.adamw_tensors) globs += " '" + g + "'";
  }
  return fmt::format(
      "{} {}/scripts/torch_reference_gpt.py --init {} --batches {} --steps {} --lr {} --warmup {} "
      "--total-steps {} --min-lr {} --weight-decay {} --beta1 {} --beta2 {} --eps {} "
      "--max-grad-norm {} --no-decay{} --threads 1 --out {}",
      python, GEOTRAIN_SOURCE_DIR, init_path.string(), batches_path.string(), kSteps, config.lr,
      config.warmup_steps, config.total_steps(), config.min_lr, oc.weight_decay, oc.beta1, oc.beta2,
      oc.eps, config.max_grad_norm, globs, torch_dir.string());
}

// Trains gpt-tiny for kSteps with worker.optimizer = `optimizer_yaml` (flow YAML, e.g.
// "{kind: adamw, beta2: 0.95}") here and in PyTorch, and checks the losses and final parameters.
void check_parity(const std::string& name, const std::string& optimizer_yaml) {
  const std::filesystem::path corpus = worker::DataConfig::kKjvFile;
  REQUIRE_MESSAGE(std::filesystem::exists(corpus), "the KJV corpus ", corpus.string(),
                  " is missing: run scripts/bootstrap.sh");
  const std::string python = python_with_torch();
  REQUIRE_MESSAGE(!python.empty(),
                  "no python3 with torch and numpy (tried python3 and /usr/bin/python3): the GPT "
                  "parity test needs PyTorch; run scripts/bootstrap.sh (python3-torch, "
                  "python3-numpy)");

  test::TempDir dir("gpt-parity-" + name);
  const auto config_path = dir.path() / "parity.yaml";
  // 1 region x 1 worker: the trainer's world is 1 and its global rank 0.
  std::ofstream(config_path) << fmt::format(R"(regions: [solo]
model: {{kind: gpt, preset: gpt-tiny}}
worker:
  data: {{kind: text, path: "{}"}}
  batch_size: 4
  rounds: {}
  local_steps: 1
  seed: 20261123
  optimizer: {}
  lr: 0.001
  warmup_steps: 5
  lr_decay: cosine
  min_lr: 0.0001
  max_grad_norm: 1.0
  anomaly_guard: {{enabled: false}}
)",
                                            corpus.string(), kSteps, optimizer_yaml);
  const auto init_path = dir.path() / "init.safetensors";
  const auto batches_path = dir.path() / "batches.npy";
  {
    const auto r = test::run_binary("--log-level warn export-init --config " +
                                    config_path.string() + " --out " + init_path.string());
    INFO(r.text);
    REQUIRE(r.code == 0);
  }
  {
    const auto r =
        test::run_binary(fmt::format("--log-level warn dump-batches --config {} --steps "
                                     "{} --out {}",
                                     config_path.string(), kSteps, batches_path.string()));
    INFO(r.text);
    REQUIRE(r.code == 0);
  }

  // geotrain: the worker's path, configured from the same file as the trainer configures it.
  const auto config = worker::load_worker_config(config_path);
  REQUIRE(config.model.kind == "gpt");
  const auto model = models::make_model(config.model);
  const ParamTable table = model->make_table(config.model.critical);
  const auto init_file = models::read_safetensors(init_path);
  std::vector<float> params = load_into_layout(init_file, table, init_path.string());
  {
    std::vector<float> expected(params.size());
    model->init(expected, config.seed);
    CHECK_MESSAGE(params == expected, "export-init wrote other values than init(worker.seed)");
  }
  const auto batches = models::read_npy_int32(batches_path);
  const size_t batch = config.batch_size.of_rank(config.workers, 0), window = config.model.window();
  REQUIRE(batches.shape == std::vector<uint64_t>{kSteps, batch, window});
  {
    const auto text = worker::load_text_corpus(corpus, config.data.validation_fraction);
    const worker::TextWindows windows(text, window, static_cast<uint32_t>(batch), config.seed, 1,
                                      0);
    const auto last = windows.batch(kSteps - 1);
    CHECK_MESSAGE(std::equal(last.tokens.begin(), last.tokens.end(),
                             batches.values.end() - static_cast<std::ptrdiff_t>(batch * window)),
                  "dump-batches' last batch is not the trainer's micro-batch ", kSteps - 1);
  }

  const std::vector<double> losses = train_here(config, *model, table, params, batches);

  // PyTorch on the same files.
  const auto torch_dir = dir.path() / "torch";
  const auto command = torch_reference_command(python, config, init_path, batches_path, torch_dir);
  const auto torch_run = run_command(command);
  INFO(command);
  INFO(torch_run.text);
  REQUIRE(torch_run.code == 0);
  nlohmann::json torch_losses;
  std::ifstream(torch_dir / "losses.json") >> torch_losses;
  REQUIRE(torch_losses["losses"].size() == kSteps);

  double worst_loss = 0;
  for (int j = 0; j < kSteps; ++j) {
    const double want = torch_losses["losses"][j].get<double>();
    const double rel = std::abs(losses[j] - want) / std::abs(want);
    worst_loss = std::max(worst_loss, rel);
    CHECK_MESSAGE(rel <= kLossTolerance, "step ", j, ": geotrain loss ", losses[j], ", torch ",
                  want, ", relative difference ", rel);
  }

  const auto torch_params = load_into_layout(
      models::read_safetensors(torch_dir / "params.safetensors"), table, "torch's params");
  double worst_param = 0;
  std::string worst_tensor;
  for (const TensorInfo& t : table.tensors()) {
    double diff = 0, scale = 0;
    for (uint64_t i = t.offset; i < t.offset + t.size; ++i) {
      diff = std::max(diff, double(std::abs(params[i] - torch_params[i])));
      scale = std::max(scale, double(std::abs(torch_params[i])));
    }
    const double rel = diff / scale;
    if (rel >= worst_param) {
      worst_param = rel;
      worst_tensor = t.name;
    }
    CHECK_MESSAGE(rel <= kParamTolerance, t.name, ": max|a-b| / max|b| = ", rel);
  }
  // Training must have moved the parameters, or the comparison proves nothing.
  CHECK(losses.back() < losses.front());
  CHECK(params != load_into_layout(init_file, table, init_path.string()));
  MESSAGE(fmt::format(
      "gpt-tiny {} parity over {} steps: max loss relative difference {:.3g} (tolerance {:g}); max "
      "over tensors of max|a-b| / max|b| = {:.3g} in {} (tolerance {:g}); loss {:.4f} -> {:.4f}",
      name, kSteps, worst_loss, kLossTolerance, worst_param, worst_tensor, kParamTolerance,
      losses.front(), losses.back()));
}

}  // namespace

TEST_CASE("geotrain's GPT trains like PyTorch's: 20 AdamW steps of gpt-tiny on the KJV corpus") {
  check_parity("adamw", "{kind: adamw, beta1: 0.9, beta2: 0.95, eps: 1.0e-8, weight_decay: 0.1}");
}

TEST_CASE("geotrain's GPT trains like PyTorch's: 20 Muon steps of gpt-tiny on the KJV corpus") {
  // Muon for the 20 block matrices at muon_lr 0.02 (x the schedule's multiplier), AdamW for the
  // embeddings, LayerNorms and biases at lr 0.001; weight decay 0.1 on both.
  check_parity("muon",
               "{kind: muon, muon_lr: 0.02, muon_momentum: 0.95, muon_nesterov: true, "
               "muon_ns_steps: 5, beta1: 0.9, beta2: 0.95, eps: 1.0e-8, weight_decay: 0.1}");
}
