#include "worker/training/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.hpp"
#include "kernels/ops/newton_schulz.hpp"
#include "kernels/ops/threads.hpp"

namespace geotrain::worker {

OptimizerKind parse_optimizer_kind(const std::string& name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adamw") return OptimizerKind::kAdamW;
  if (name == "muon") return OptimizerKind::kMuon;
  GT_REQUIRE(false, "optimizer '{}' is unknown (sgd, adamw, muon)", name);
  return OptimizerKind::kSgd;
}

const char* optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kAdamW:
      return "adamw";
    case OptimizerKind::kMuon:
      return "muon";
  }
  GT_ASSERT(false, "optimizer kind {}", static_cast<int>(kind));
  return "";
}

std::vector<uint8_t> weight_decay_mask(const ParamTable& table,
                                       const std::vector<std::string>& no_decay) {
  std::vector<uint8_t> mask(table.total_elements(), 1);
  for (const TensorInfo& t : table.tensors()) {
    bool skip = false;
    for (const auto& glob : no_decay) skip = skip || glob_match(glob, t.name);
    if (skip) std::fill_n(mask.begin() + static_cast<std::ptrdiff_t>(t.offset), t.size, uint8_t{0});
  }
  return mask;
}

std::vector<MatrixBlock> muon_matrices(const ParamTable& table,
                                       const std::vector<std::vector<uint64_t>>& shapes,
                                       const std::vector<std::string>& adamw_tensors) {
  const auto& tensors = table.tensors();
  GT_REQUIRE(shapes.size() == tensors.size(), "muon: {} tensor shapes for a table of {} tensors",
             shapes.size(), tensors.size());
  std::vector<MatrixBlock> out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = tensors[i];
    uint64_t elements = 1;
    for (uint64_t d : shapes[i]) elements *= d;
    GT_REQUIRE(elements == t.size, "muon: tensor {} has {} elements, its shape {}", t.name, t.size,
               elements);
    if (shapes[i].size() != 2) continue;
    bool adamw = false;
    for (const auto& glob : adamw_tensors) adamw = adamw || glob_match(glob, t.name);
    if (!adamw) out.push_back({t.name, t.offset, shapes[i][0], shapes[i][1]});
  }
  return out;
}

namespace {

// The Muon settings and matrices, checked for the constructor.
void check_muon(const OptimizerConfig& c, size_t parameters,
                const std::vector<MatrixBlock>& matrices, bool part) {
  GT_REQUIRE(c.muon_momentum >= 0 && c.muon_momentum < 1,
             "optimizer muon_momentum {} not in [0, 1)", c.muon_momentum);
  GT_REQUIRE(c.muon_ns_steps >= 1 && c.muon_ns_steps <= 100,
             "optimizer muon_ns_steps {} not in [1, 100]", c.muon_ns_steps);
  GT_REQUIRE(std::isfinite(c.muon_lr) && c.muon_lr > 0, "optimizer muon_lr {} must be > 0",
             c.muon_lr);
  GT_REQUIRE(part || !matrices.empty(),
             "optimizer muon: no 2-D weight matrix to orthogonalise (every tensor is 1-D or "
             "matches a worker.optimizer.adamw_tensors glob)");
  uint64_t end = 0;
  for (const MatrixBlock& b : matrices) {
    GT_REQUIRE(
        b.rows > 0 && b.cols > 0 && b.offset >= end && b.offset + b.rows * b.cols <= parameters,
        "optimizer muon: matrix {} ({} x {} at {}) overlaps another or lies outside the {} "
        "parameters",
        b.name, b.rows, b.cols, b.offset, parameters);
    end = b.offset + b.rows * b.cols;
  }
}

// PyTorch's lerp (aten's CPU kernel): a + w (b - a) for |w| < 0.5, else b - (b - a)(1 - w).
inline float torch_lerp(float a, float b, float w) {
  const float diff = b - a;
  return std::abs(w) < 0.5f ? a + w * diff : b - diff * (1.0f - w);
}

}  // namespace

Optimizer::Optimizer(const OptimizerConfig& config, size_t parameters,
                     std::vector<uint8_t> decay_mask, std::vector<MatrixBlock> matrices, bool part)
    : config_(config), decay_mask_(std::move(decay_mask)) {
  GT_REQUIRE(decay_mask_.empty() || decay_mask_.size() == parameters,
             "optimizer: decay mask has {} elements, {} parameters", decay_mask_.size(),
             parameters);
  GT_REQUIRE(config.momentum >= 0 && config.momentum < 1, "optimizer momentum {} not in [0, 1)",
             config.momentum);
  GT_REQUIRE(config.beta1 >= 0 && config.beta1 < 1, "optimizer beta1 {} not in [0, 1)",
             config.beta1);
  GT_REQUIRE(config.beta2 >= 0 && config.beta2 < 1, "optimizer beta2 {} not in [0, 1)",
             config.beta2);
  GT_REQUIRE(config.eps > 0, "optimizer eps {} must be > 0", config.eps);
  GT_REQUIRE(config.weight_decay >= 0, "optimizer weight_decay {} must be >= 0",
             config.weight_decay);
  if (config.kind == OptimizerKind::kMuon) {
    check_muon(config, parameters, matrices, part);
    matrices_ = std::move(matrices);
  }
  if (config.kind == OptimizerKind::kAdamW || config.kind == OptimizerKind::kMuon) {
    m_.assign(parameters, 0.0f);
    v_.assign(parameters, 0.0f);
  } else if (config.momentum > 0) {
    m_.assign(parameters, 0.0f);
  }
}

void Optimizer::restore(ConstFloatSpan m, ConstFloatSpan v, uint64_t steps) {
  GT_REQUIRE(m.size() == m_.size() && v.size() == v_.size(),
             "optimizer state of {} + {} values does not fit this optimizer's {} + {}", m.size(),
             v.size(), m_.size(), v_.size());
  std::copy(m.begin(), m.end(), m_.begin());
  std::copy(v.begin(), v.end(), v_.begin());
  steps_ = steps;
}

void Optimizer::step(FloatSpan params, ConstFloatSpan grad, float lr, float muon_lr) {
  GT_REQUIRE(params.size() == grad.size(), "optimizer: {} parameters but {} gradients",
             params.size(), grad.size());
  GT_REQUIRE(m_.empty() || m_.size() == params.size(),
             "optimizer: state for {} parameters, given {}", m_.size(), params.size());
  GT_REQUIRE(config_.kind != OptimizerKind::kMuon || (std::isfinite(muon_lr) && muon_lr > 0),
             "optimizer muon: the matrices' lr {} must be > 0", muon_lr);
  ++steps_;
  const size_t n = params.size();
  const float wd = config_.weight_decay;
  if (config_.kind == OptimizerKind::kSgd) {
    const float mu = config_.momentum;
    for (size_t i = 0; i < n; ++i) {
      const float wd_i = decay_mask_.empty() || decay_mask_[i] ? wd : 0.0f;
      float g = grad[i] + wd_i * params[i];
      if (mu > 0) {
        // PyTorch: the buffer starts as the first gradient (no dampening).
        m_[i] = steps_ == 1 ? g : mu * m_[i] + g;
        g = config_.nesterov ? g + mu * m_[i] : m_[i];
      }
      params[i] -= lr * g;
    }
    return;
  }
  if (config_.kind == OptimizerKind::kMuon) {
    muon_step(params, grad, lr, muon_lr);
    return;
  }
  adamw_range(params, grad, 0, n, lr);
}

void Optimizer::adamw_range(FloatSpan params, ConstFloatSpan grad, size_t begin, size_t end,
                            float lr) {
  const float b1 = config_.beta1, b2 = config_.beta2, wd = config_.weight_decay;
  const double t = static_cast<double>(steps_);
  const auto bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(b1), t));
  const auto bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(b2), t)));
  // One pass over raw pointers with no branch in the loop, so that it vectorises: the decay
  // factor is a select (1 where the mask says no decay, an exact multiply).
  const float decay = 1.0f - lr * wd, step_size = lr / bc1, eps = config_.eps;
  const uint8_t* mask = decay_mask_.empty() ? nullptr : decay_mask_.data();
  float* __restrict p = params.data();
  const float* __restrict gr = grad.data();
  float* __restrict m = m_.data();
  float* __restrict v = v_.data();
  for (size_t i = begin; i < end; ++i) {
    const float g = gr[i];
    p[i] *= mask == nullptr || mask[i] ? decay : 1.0f;  // decoupled weight decay
    m[i] = b1 * m[i] + (1.0f - b1) * g;
    v[i] = b2 * v[i] + (1.0f - b2) * g * g;
    // PyTorch's form: p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
    p[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
  }
}

void Optimizer::muon_step(FloatSpan params, ConstFloatSpan grad, float lr, float muon_lr) {
  size_t at = 0;
  for (const MatrixBlock& b : matrices_) {
    adamw_range(params, grad, at, b.offset, lr);
    at = b.offset + b.rows * b.cols;
  }
  adamw_range(params, grad, at, params.size(), lr);
  // One task per matrix, each with single-threaded GEMMs: the same bits for any thread count.
  kernels::cpu::BlasSingleThreaded one_blas_thread;
  kernels::cpu::parallel_for(matrices_.size(), [&](size_t i) {
    muon_matrix(matrices_[i], params.data(), grad.data(), muon_lr);
  });
}

void Optimizer::muon_matrix(const MatrixBlock& b, float* params, const float* grad, float lr) {
  const size_t n = b.rows * b.cols;
  const float mu = config_.muon_momentum;
  float* m = m_.data() + b.offset;
  float* p = params + b.offset;
  const float* g = grad + b.offset;
  std::vector<float> u(n);
  for (size_t i = 0; i < n; ++i) {
    m[i] = torch_lerp(m[i], g[i], 1.0f - mu);  // momentum.lerp_(grad, 1 - beta)
    u[i] = config_.muon_nesterov ? torch_lerp(g[i], m[i], mu) : m[i];
  }
  kernels::cpu::newton_schulz5(u.data(), u.data(), b.rows, b.cols,
                               static_cast<int>(config_.muon_ns_steps));
  // The reference: update *= max(1, rows / cols) ** 0.5 (a Python float, rounded once to fp32).
  const auto scale = static_cast<float>(
      std::sqrt(std::max(1.0, static_cast<double>(b.rows) / static_cast<double>(b.cols))));
  const float decay = 1.0f - lr * config_.weight_decay;
  const uint8_t* mask = decay_mask_.empty() ? nullptr : decay_mask_.data() + b.offset;
  for (size_t i = 0; i < n; ++i) {
    p[i] *= mask == nullptr || mask[i] ? decay : 1.0f;  // p.mul_(1 - lr wd)
    p[i] -= lr * (u[i] * scale);                        // p.add_(update, alpha=-lr)
  }
}

void LrSchedule::validate() const {
  GT_REQUIRE(base_lr > 0 && std::isfinite(base_lr), "lr {} must be finite and > 0", base_lr);
  GT_REQUIRE(min_lr >= 0 && min_lr <= base_lr, "min_lr {} must be in [0, lr {}]", min_lr, base_lr);
  GT_REQUIRE(decay != LrDecay::kCosine || total_steps > warmup_steps,
             "cosine schedule: total_steps {} must exceed warmup_steps {}", total_steps,
             warmup_steps);
  GT_REQUIRE(decay != LrDecay::kCyclic || (cycle_steps > 0 && cycle_mult >= 1),
             "cyclic schedule: the cycle of {} steps must be > 0 and its multiplier {} >= 1",
             cycle_steps, cycle_mult);
  GT_REQUIRE(reference_batch == 0 || global_batch > 0,
             "lr scaling by batch: global_batch is 0 (reference_batch {})", reference_batch);
}

float LrSchedule::peak_lr() const {
  if (reference_batch == 0) return base_lr;
  const double ratio = static_cast<double>(global_batch) / static_cast<double>(reference_batch);
  return base_lr * static_cast<float>(scaling == LrScaling::kSqrt ? std::sqrt(ratio) : ratio);
}

float LrSchedule::at(uint64_t step) const {
  const float peak = peak_lr();
  if (step < warmup_steps)
    return peak * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
  if (decay == LrDecay::kConstant) return peak;
  double t = 0;  // the position in the (current) cosine, 0 to 1
  if (decay == LrDecay::kCyclic) {
    uint64_t into = step - warmup_steps, cycle = cycle_steps;
    if (cycle_mult == 1) into %= cycle;
    while (into >= cycle) {  // cycles grow geometrically: 64 at most
      into -= cycle;
      cycle = cycle > UINT64_MAX / cycle_mult ? UINT64_MAX : cycle * cycle_mult;
    }
    t = static_cast<double>(into) / static_cast<double>(cycle);
  } else {
    t = std::min(1.0, static_cast<double>(step - warmup_steps) /
                          static_cast<double>(total_steps - warmup_steps));
  }
  return min_lr +
         (peak - min_lr) * static_cast<float>(0.5 * (1.0 + std::cos(std::numbers::pi * t)));
}

double squared_norm(ConstFloatSpan grad) {
  double s = 0;
  for (float g : grad) s += static_cast<double>(g) * g;
  return s;
}

double global_grad_norm(ConstFloatSpan grad) { return std::sqrt(squared_norm(grad)); }

void clip_to_norm(FloatSpan grad, double norm, double max_norm) {
  GT_REQUIRE(max_norm > 0, "max_grad_norm {} must be > 0", max_norm);
  if (norm > max_norm) {
    const auto scale = static_cast<float>(max_norm / (norm + 1e-6));
    for (float& g : grad) g *= scale;
  }
}

double clip_grad_norm(FloatSpan grad, double max_norm) {
  const double norm = global_grad_norm(grad);
  clip_to_norm(grad, norm, max_norm);
  return norm;
}

}  // namespace geotrain::worker
