#include "worker/training/local_step.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace geotrain::worker {

namespace {

// The optimizer of [begin, end): its slice of the decay mask, and the Muon matrices inside it
// rebased to it (InputError when one straddles an edge).
Optimizer range_optimizer(const LocalStepConfig& c, uint64_t parameters, uint64_t begin,
                          uint64_t end) {
  GT_REQUIRE(begin <= end && end <= parameters,
             "local step: optimizer range [{}, {}) outside the {} parameters", begin, end,
             parameters);
  if (begin == 0 && end == parameters)
    return Optimizer(c.optimizer, parameters, c.decay_mask, c.muon_matrices);
  std::vector<uint8_t> mask;
  if (!c.decay_mask.empty())
    mask.assign(c.decay_mask.begin() + static_cast<ptrdiff_t>(begin),
                c.decay_mask.begin() + static_cast<ptrdiff_t>(end));
  std::vector<MatrixBlock> matrices;
  for (MatrixBlock m : c.muon_matrices) {
    const uint64_t m_end = m.offset + m.rows * m.cols;
    if (m_end <= begin || m.offset >= end) continue;
    GT_REQUIRE(m.offset >= begin && m_end <= end,
               "local step: Muon matrix {} [{}, {}) is cut by the optimizer range [{}, {})", m.name,
               m.offset, m_end, begin, end);
    m.offset -= begin;
    matrices.push_back(std::move(m));
  }
  return Optimizer(c.optimizer, end - begin, std::move(mask), std::move(matrices),
                   /*part=*/true);
}

}  // namespace

LocalStep::LocalStep(const LocalStepConfig& config, size_t parameters)
    : config_(config),
      shard_begin_(config.shard_end == 0 ? 0 : config.shard_begin),
      shard_end_(config.shard_end == 0 ? parameters : config.shard_end),
      optimizer_(range_optimizer(config, parameters, shard_begin_, shard_end_)),
      guard_(config.guard),
      grad_(parameters, 0.0f) {
  GT_REQUIRE(config.accumulation_steps >= 1, "accumulation_steps {} must be >= 1",
             config.accumulation_steps);
  GT_REQUIRE(config.max_grad_norm >= 0, "max_grad_norm {} must be >= 0", config.max_grad_norm);
  config.schedule.validate();
}

bool LocalStep::add_micro_batch(double mean_loss) {
  GT_ASSERT(micro_ < config_.accumulation_steps, "{} micro-batches added, {} expected", micro_ + 1,
            config_.accumulation_steps);
  loss_sum_ += mean_loss;
  return ++micro_ == config_.accumulation_steps;
}

void LocalStep::discard_accumulated() {
  std::fill(grad_.begin(), grad_.end(), 0.0f);
  micro_ = 0;
  loss_sum_ = 0;
}

StepReport LocalStep::begin_report(uint32_t reduced_over) const {
  GT_ASSERT(micro_ == config_.accumulation_steps, "a step after {} of {} micro-batches", micro_,
            config_.accumulation_steps);
  GT_REQUIRE(reduced_over >= 1, "local step: reduced over 0 workers");
  StepReport r;
  r.step = step_;
  r.loss = loss_sum_ / static_cast<double>(micro_);
  r.lr = config_.schedule.at(schedule_at_.value_or(step_));
  return r;
}

void LocalStep::judge(StepReport& r, uint32_t reduced_over, const RegionSum& region_sum) {
  const float scale = 1.0f / static_cast<float>(micro_ * reduced_over);
  if (!config_.gradient_sharded) {
    if (scale != 1.0f)
      for (float& g : grad_) g *= scale;
    // Guard first, on the unclipped gradient: clipping would turn an infinity into NaNs.
    r.verdict = guard_.check(step_, r.loss, grad_);
    if (r.verdict == Verdict::kAccept)
      r.grad_norm = config_.max_grad_norm > 0 ? clip_grad_norm(grad_, config_.max_grad_norm)
                                              : global_grad_norm(grad_);
    return;
  }
  // Stage 2: the same arithmetic on this worker's range, the squared norm summed over the
  // region's ranges (a non-finite one: a NaN or an infinity somewhere).
  GT_REQUIRE(region_sum != nullptr, "local step: a sharded gradient needs the region's norm");
  const FloatSpan mine = range(FloatSpan(grad_));
  if (scale != 1.0f)
    for (float& g : mine) g *= scale;
  const double norm_sq = region_sum(squared_norm(mine));
  r.verdict = guard_.check(step_, r.loss, std::isfinite(norm_sq));
  if (r.verdict != Verdict::kAccept) return;
  r.grad_norm = std::sqrt(norm_sq);
  if (config_.max_grad_norm > 0) clip_to_norm(mine, r.grad_norm, config_.max_grad_norm);
}

StepReport LocalStep::apply(FloatSpan params, uint32_t reduced_over, const RegionSum& region_sum) {
  GT_REQUIRE(params.size() == grad_.size(), "local step: {} parameters, gradient has {}",
             params.size(), grad_.size());
  StepReport r = begin_report(reduced_over);
  judge(r, reduced_over, region_sum);
  if (r.verdict == Verdict::kAccept) {
    // Muon's matrices: their own peak lr, under the same schedule multiplier.
    const float muon_lr = config_.optimizer.muon_lr * (r.lr / config_.schedule.base_lr);
    optimizer_.step(range(params), range(FloatSpan(grad_)), r.lr, muon_lr);
  }
  std::fill(grad_.begin(), grad_.end(), 0.0f);
  micro_ = 0;
  loss_sum_ = 0;
  ++step_;
  return r;
}

StepReport LocalStep::decide(double grad_sum_norm_sq, uint32_t reduced_over, float* grad_scale) {
  StepReport r = begin_report(reduced_over);
  const double scale = 1.0 / static_cast<double>(micro_ * reduced_over);
  const double norm = std::sqrt(grad_sum_norm_sq) * scale;
  r.verdict = guard_.check(step_, r.loss, std::isfinite(norm));
  *grad_scale = 0.0f;
  if (r.verdict == Verdict::kAccept) {
    r.grad_norm = norm;
    // PyTorch's clip_grad_norm_ coefficient, as clip_grad_norm applies it.
    const double clip = config_.max_grad_norm > 0 && norm > config_.max_grad_norm
                            ? config_.max_grad_norm / (norm + 1e-6)
                            : 1.0;
    *grad_scale = static_cast<float>(scale * clip);
    optimizer_.count_step();
  }
  micro_ = 0;
  loss_sum_ = 0;
  ++step_;
  return r;
}

}  // namespace geotrain::worker
