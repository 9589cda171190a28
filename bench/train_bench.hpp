// `geotrain bench train`: one worker's training step, timed in two parts: the model's forward +
// backward and the optimizer (AdamW with the default no-decay globs). On the CPU
// (--device cpu): models::Model::forward_backward and worker::Optimizer. On a GPU (--device cuda,
// --precision fp32 | bf16): the worker's CUDA backend, device-resident, as the trainer drives it
// (accumulate; reduce_gradient_norm_sq + apply_step is the optimizer part); MFU against the
// device's stated peak. Random tokens (GPT) or random inputs and labels (MLP)
// from a fixed seed; the data loader is not part of it. Reports tokens (samples for an MLP) per
// second, the split, and the model FLOPs per token with the formula it used, so that the rate can
// be compared with `scripts/torch_reference_gpt.py --bench` on the same configuration.
// Blocks until done; prints a table or one JSON document to stdout.
#pragma once

#include <cstdint>
#include <string>

namespace geotrain::bench {

struct TrainBenchOptions {
  std::string model = "gpt-tiny";  // a GPT preset (models::gpt_preset_names) or an MLP spec
  uint32_t seq_len = 0;            // GPT: overrides the preset's T when > 0
  uint32_t batch = 8;
  std::string device = "cpu";      // cpu | cuda
  std::string precision = "fp32";  // fp32 | bf16 (cuda, GPT)
  int threads = 1;                 // kernels::cpu::set_threads
  int steps = 10;                  // timed steps
  int warmup_steps = 2;            // untimed first steps: scratch allocation, page faults, caches
  bool json = false;
};

struct TrainBenchResult {
  std::string model;
  std::string kind;  // gpt | mlp
  uint32_t batch = 0;
  uint32_t seq_len = 0;  // 1 for an MLP: one "token" is one sample
  int threads = 0;
  int steps = 0;
  uint64_t parameters = 0;
  // GPT: 6 N + 12 L T d with N = parameters less the position embedding (the tied wte counts
  // once, as the output head's matmul); MLP: 6 N per sample.
  double flops_per_token = 0;
  double tokens_per_s = 0;
  double step_ms = 0;
  double forward_backward_ms = 0;
  double optimizer_ms = 0;
  double gflops = 0;      // flops_per_token * tokens_per_s
  double loss = 0;        // of the last step, a sanity check (ln(vocab) at the start for a GPT)
  std::string device;     // cpu | cuda
  std::string precision;  // fp32 | bf16
  std::string device_name;
  // cuda: the device's dense peak for this precision (TFLOP/s; bf16 tensor cores, or fp32
  // without TF32), where the device is known (0 otherwise), and gflops over it.
  double peak_tflops = 0;
  double mfu = 0;
};

TrainBenchResult measure_train(const TrainBenchOptions& options);
int run_train_bench(const TrainBenchOptions& options);

}  // namespace geotrain::bench
