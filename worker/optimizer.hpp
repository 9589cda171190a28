// The local (inner) optimizer of a worker: SGD with momentum and AdamW, with PyTorch's update
// rules, their state in the ParamTable's flat layout; and the learning-rate schedule.
//
// Optimizer owns its state buffers (momentum, or Adam's first and second moments), one element
// per parameter. step() updates params in place from an already reduced, clipped gradient.
// LrSchedule is a plain value: linear warmup, then constant or cosine decay, optionally scaled
// linearly by global batch / reference batch (Goyal et al.). Nothing blocks; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/param_table.hpp"
#include "core/span.hpp"

namespace geotrain::worker {

enum class OptimizerKind { kSgd, kAdamW };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  float momentum = 0.9f;      // SGD; 0 disables the momentum buffer
  bool nesterov = false;      // SGD
  float weight_decay = 0.0f;  // SGD: L2 added to the gradient; AdamW: decoupled, p *= 1 - lr wd
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // AdamW
  // Tensors that get no weight decay (globs on tensor names): biases, LayerNorm gains and
  // biases, and embeddings, as GPT-2 / nanoGPT train them. Applied through a decay mask.
  std::vector<std::string> no_decay = default_no_decay();
  static std::vector<std::string> default_no_decay() {
    return {"*.b", "*.bias", "*ln_*", "wte", "wpe"};
  }
};

// One byte per parameter of `table`'s flat layout: 1 where weight decay applies, 0 in tensors
// matching a `no_decay` glob.
std::vector<uint8_t> weight_decay_mask(const ParamTable& table,
                                       const std::vector<std::string>& no_decay);

// "sgd" or "adamw"; InputError naming the value otherwise.
OptimizerKind parse_optimizer_kind(const std::string& name);

class Optimizer {
 public:
  // InputError on momentum/betas outside [0, 1), eps <= 0 or weight_decay < 0, or a decay mask
  // of another size. decay_mask: 1 where weight decay applies (weight_decay_mask); empty: every
  // parameter is decayed.
  Optimizer(const OptimizerConfig& config, size_t parameters, std::vector<uint8_t> decay_mask = {});

  // params -= lr * update(grad). InputError when the spans do not match the state's size.
  void step(FloatSpan params, ConstFloatSpan grad, float lr);
  uint64_t steps() const { return steps_; }
  const OptimizerConfig& config() const { return config_; }
  const std::vector<uint8_t>& decay_mask() const { return decay_mask_; }
  // Counts a step taken elsewhere (a device-resident optimizer holding the state): steps() is
  // what its bias correction and SGD's first-step rule read.
  void count_step() { ++steps_; }

  // The state a worker checkpoint holds (worker/worker_checkpoint.hpp): SGD's momentum or
  // Adam's first moment (empty for SGD without momentum), Adam's second moment (empty for SGD).
  ConstFloatSpan first_moment() const { return m_; }
  ConstFloatSpan second_moment() const { return v_; }
  // Restores that state; InputError when a buffer's size is not this optimizer's.
  void restore(ConstFloatSpan m, ConstFloatSpan v, uint64_t steps);

 private:
  OptimizerConfig config_;
  std::vector<float> m_;             // SGD momentum buffer, or Adam's first moment
  std::vector<float> v_;             // Adam's second moment
  std::vector<uint8_t> decay_mask_;  // (parameters) or empty
  uint64_t steps_ = 0;
};

enum class LrDecay { kConstant, kCosine };

struct LrSchedule {
  float base_lr = 0.1f;
  uint64_t warmup_steps = 0;  // lr ramps linearly from base/warmup to base over these steps
  uint64_t total_steps = 0;   // cosine: decays to min_lr at this step
  LrDecay decay = LrDecay::kConstant;
  float min_lr = 0.0f;
  uint32_t reference_batch = 0;  // > 0: scale base_lr by global_batch / reference_batch
  uint32_t global_batch = 0;

  // InputError on inconsistent values (cosine without total_steps > warmup_steps, ...).
  void validate() const;
  float peak_lr() const;
  // The learning rate for step `step` (0-based).
  float at(uint64_t step) const;
};

// sqrt(sum g^2) in double.
double global_grad_norm(ConstFloatSpan grad);
// PyTorch's clip_grad_norm_: when the norm exceeds max_norm (> 0), scales grad by
// max_norm / (norm + 1e-6). Returns the norm before clipping.
double clip_grad_norm(FloatSpan grad, double max_norm);

}  // namespace geotrain::worker
