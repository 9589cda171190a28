// The local (inner) optimizer of a worker: SGD with momentum and AdamW, with PyTorch's update
// rules, and Muon; their state in the ParamTable's flat layout; and the learning-rate schedule.
//
// Muon (kind muon) follows Keller Jordan's SingleDeviceMuonWithAuxAdam (github.com/KellerJordan/
// Muon, muon.py, its current lerp form), with the split MuLoCo (arXiv 2505.23725) trains DiLoCo's
// inner steps with: the 2-D weight matrices (MatrixBlock, muon_matrices: every 2-D tensor not
// named by an `adamw_tensors` glob) take, per matrix G (rows, cols) with its momentum buffer M:
//   M = lerp(M, G, 1 - mu)                       (M = mu M + (1 - mu) G; M starts at 0)
//   U = nesterov ? lerp(G, M, mu) : M            ((1 - mu) G + mu M)
//   O = newton_schulz5(U, ns_steps) * sqrt(max(1, rows / cols))   (kernels/ops/newton_schulz.hpp)
//   P *= 1 - muon_lr wd (where the decay mask says so);  P -= muon_lr O
// and every other tensor (embeddings and the tied head, LayerNorm gains and biases, all biases)
// takes the AdamW step below at the schedule's lr, with the same betas, eps, weight decay and
// no-decay mask. Newton-Schulz runs in fp32 (the reference: bf16 on a GPU); CPU only.
//
// Optimizer owns its state buffers (momentum, or Adam's first and second moments, or for Muon the
// matrices' momentum in the first-moment buffer and Adam's moments elsewhere), one element per
// parameter. step() updates params in place from an already reduced, clipped gradient.
// LrSchedule is a plain value: linear warmup, then constant or cosine decay, optionally scaled
// linearly by global batch / reference batch (Goyal et al.). Nothing blocks; not thread-safe
// (Muon's step spreads its matrices over the kernels' thread pool).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/param_table.hpp"
#include "core/span.hpp"

namespace geotrain::worker {

enum class OptimizerKind { kSgd, kAdamW, kMuon };

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
  // Muon (kind muon). muon_lr is the matrices' peak lr: each step they take
  // muon_lr * (schedule lr / worker.lr), so warmup, decay and batch scaling apply alike.
  float muon_lr = 0.02f;
  float muon_momentum = 0.95f;
  bool muon_nesterov = true;
  uint32_t muon_ns_steps = 5;
  // 2-D tensors that stay with AdamW (globs; 1-D tensors always do): the embeddings (and so the
  // head tied to wte), LayerNorm gains, biases.
  std::vector<std::string> adamw_tensors = default_adamw_tensors();
  static std::vector<std::string> default_adamw_tensors() {
    return {"wte", "wpe", "*ln_*", "*.b", "*.bias"};
  }
};

// One weight matrix in the flat layout: rows x cols elements, row-major, from `offset`.
struct MatrixBlock {
  std::string name;
  uint64_t offset = 0;
  uint64_t rows = 0, cols = 0;
};

// One byte per parameter of `table`'s flat layout: 1 where weight decay applies, 0 in tensors
// matching a `no_decay` glob.
std::vector<uint8_t> weight_decay_mask(const ParamTable& table,
                                       const std::vector<std::string>& no_decay);

// The matrices Muon updates: the tensors of `table` whose shape (`shapes`, one per tensor in
// table order, as models::Model::tensor_shapes() gives them) is 2-D, less those matching an
// `adamw_tensors` glob; in table order. InputError when the shapes do not fit the table.
std::vector<MatrixBlock> muon_matrices(const ParamTable& table,
                                       const std::vector<std::vector<uint64_t>>& shapes,
                                       const std::vector<std::string>& adamw_tensors);

// "sgd", "adamw" or "muon"; InputError naming the value otherwise.
OptimizerKind parse_optimizer_kind(const std::string& name);
// The config name of a kind (parse_optimizer_kind's inverse).
const char* optimizer_kind_name(OptimizerKind kind);

class Optimizer {
 public:
  // InputError on momentum/betas outside [0, 1), eps <= 0 or weight_decay < 0, or a decay mask
  // of another size. decay_mask: 1 where weight decay applies (weight_decay_mask); empty: every
  // parameter is decayed. matrices (muon_matrices): what Muon updates; kind muon needs at least
  // one, in offset order, not overlapping, inside the parameters (InputError otherwise); other
  // kinds ignore them. part: the optimizer of one range of a model's parameters (ZeRO,
  // worker/training/zero_shards.hpp), which may hold none of Muon's matrices.
  Optimizer(const OptimizerConfig& config, size_t parameters, std::vector<uint8_t> decay_mask = {},
            std::vector<MatrixBlock> matrices = {}, bool part = false);

  // params -= lr * update(grad). Muon: the matrices step at muon_lr (> 0, InputError otherwise;
  // LocalStep passes config.muon_lr scaled as the schedule scales lr), the rest at lr; other
  // kinds ignore muon_lr. InputError when the spans do not match the state's size.
  void step(FloatSpan params, ConstFloatSpan grad, float lr, float muon_lr = 0.0f);
  uint64_t steps() const { return steps_; }
  const OptimizerConfig& config() const { return config_; }
  const std::vector<uint8_t>& decay_mask() const { return decay_mask_; }
  const std::vector<MatrixBlock>& matrices() const { return matrices_; }
  // Counts a step taken elsewhere (a device-resident optimizer holding the state): steps() is
  // what its bias correction and SGD's first-step rule read.
  void count_step() { ++steps_; }

  // The state a worker checkpoint holds (worker/run/worker_checkpoint.hpp): SGD's momentum or
  // Adam's first moment (empty for SGD without momentum), Adam's second moment (empty for SGD).
  // Muon: both are full size; the first holds the matrices' momentum and Adam's first moment
  // elsewhere, the second Adam's second moment (zero, unused, in the matrices).
  ConstFloatSpan first_moment() const { return m_; }
  ConstFloatSpan second_moment() const { return v_; }
  // Restores that state; InputError when a buffer's size is not this optimizer's.
  void restore(ConstFloatSpan m, ConstFloatSpan v, uint64_t steps);

 private:
  // AdamW over params[begin, end), at steps_ (already counted).
  void adamw_range(FloatSpan params, ConstFloatSpan grad, size_t begin, size_t end, float lr);
  // Muon: AdamW between the matrices, then each matrix (one thread-pool task each).
  void muon_step(FloatSpan params, ConstFloatSpan grad, float lr, float muon_lr);
  void muon_matrix(const MatrixBlock& matrix, float* params, const float* grad, float lr);

  OptimizerConfig config_;
  std::vector<float> m_;  // SGD momentum buffer, or Adam's first moment (Muon: and momentum)
  std::vector<float> v_;  // Adam's second moment
  std::vector<uint8_t> decay_mask_;    // (parameters) or empty
  std::vector<MatrixBlock> matrices_;  // Muon's, in offset order
  uint64_t steps_ = 0;
};

// After the warm-up: hold, one cosine to min_lr at total_steps, or cosines with warm restarts
// (SGDR, Loshchilov & Hutter 2017; PyTorch's CosineAnnealingWarmRestarts): cycle i lasts
// cycle_steps x cycle_mult^i steps, each from the peak down towards min_lr, then back to the peak.
enum class LrDecay { kConstant, kCosine, kCyclic };
// How the peak follows the global batch G against a reference batch R: G / R (linear, Goyal et
// al. 2017) or sqrt(G / R) (square root, Krizhevsky 2014; Hoffer et al. 2017).
enum class LrScaling { kLinear, kSqrt };

struct LrSchedule {
  float base_lr = 0.1f;
  uint64_t warmup_steps = 0;  // lr ramps linearly from base/warmup to base over these steps
  uint64_t total_steps = 0;   // cosine: decays to min_lr at this step
  LrDecay decay = LrDecay::kConstant;
  float min_lr = 0.0f;
  uint64_t cycle_steps = 0;      // cyclic: the first cycle's steps (> 0)
  uint32_t cycle_mult = 1;       // cyclic: each cycle's length over the one before (>= 1)
  uint32_t reference_batch = 0;  // > 0: scale base_lr by global_batch / reference_batch
  uint32_t global_batch = 0;
  LrScaling scaling = LrScaling::kLinear;  // with reference_batch > 0

  // InputError on inconsistent values (cosine without total_steps > warmup_steps, ...).
  void validate() const;
  float peak_lr() const;
  // The learning rate for step `step` (0-based).
  float at(uint64_t step) const;
};

// sum g^2 in double, in element order.
double squared_norm(ConstFloatSpan grad);
// sqrt(sum g^2) in double.
double global_grad_norm(ConstFloatSpan grad);
// clip_grad_norm's scaling for a gradient (or a range of one) whose whole norm is `norm`.
void clip_to_norm(FloatSpan grad, double norm, double max_norm);
// PyTorch's clip_grad_norm_: when the norm exceeds max_norm (> 0), scales grad by
// max_norm / (norm + 1e-6). Returns the norm before clipping.
double clip_grad_norm(FloatSpan grad, double max_norm);

}  // namespace geotrain::worker
