#include "worker/training/anomaly_guard.hpp"

#include <spdlog/spdlog.h>

#include <cmath>

#include "core/error.hpp"

namespace geotrain::worker {

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::kAccept:
      return "accept";
    case Verdict::kNonFiniteGradient:
      return "non-finite gradient";
    case Verdict::kNonFiniteLoss:
      return "non-finite loss";
    case Verdict::kLossSpike:
      return "loss spike";
  }
  return "?";
}

AnomalyGuard::AnomalyGuard(const AnomalyGuardConfig& config) : config_(config) {
  GT_REQUIRE(config.window >= 2, "anomaly guard: window {} must be >= 2", config.window);
  GT_REQUIRE(config.min_samples >= 2 && config.min_samples <= config.window,
             "anomaly guard: min_samples {} must be in [2, window {}]", config.min_samples,
             config.window);
  GT_REQUIRE(config.k_sigma > 0, "anomaly guard: k_sigma {} must be > 0", config.k_sigma);
}

Verdict AnomalyGuard::check(uint64_t step, double loss, ConstFloatSpan grad) {
  if (!config_.enabled) return Verdict::kAccept;
  bool finite = true;
  if (std::isfinite(loss))
    for (float g : grad)
      if (!std::isfinite(g)) {
        finite = false;
        break;
      }
  return check(step, loss, finite);
}

Verdict AnomalyGuard::check(uint64_t step, double loss, bool gradient_finite) {
  if (!config_.enabled) return Verdict::kAccept;
  Verdict v = Verdict::kAccept;
  double mean = 0, sigma = 0;
  if (!std::isfinite(loss))
    v = Verdict::kNonFiniteLoss;
  else if (!gradient_finite)
    v = Verdict::kNonFiniteGradient;
  if (v == Verdict::kAccept && losses_.size() >= config_.min_samples) {
    for (double l : losses_) mean += l;
    mean /= static_cast<double>(losses_.size());
    for (double l : losses_) sigma += (l - mean) * (l - mean);
    sigma = std::sqrt(sigma / static_cast<double>(losses_.size() - 1));
    if (loss > mean + config_.k_sigma * sigma) v = Verdict::kLossSpike;
  }
  if (v == Verdict::kLossSpike && config_.max_consecutive_skips != 0 &&
      ++spike_streak_ > config_.max_consecutive_skips) {
    spdlog::warn(
        "step {}: loss {} is spike {} in a row beyond {:.4g} + {} sigma ({:.4g}): taken as a new "
        "loss level, not a spike; the step is applied and the window starts again",
        step, loss, spike_streak_, mean, config_.k_sigma, sigma);
    losses_.clear();
    v = Verdict::kAccept;
  }
  if (v != Verdict::kAccept) {
    ++skipped_;
    spdlog::warn(
        "step {} skipped: {} (loss {}, window mean {:.4g}, sigma {:.4g}); {} skipped so far", step,
        to_string(v), loss, mean, sigma, skipped_);
    return v;
  }
  spike_streak_ = 0;
  losses_.push_back(loss);
  if (losses_.size() > config_.window) losses_.pop_front();
  return v;
}

void AnomalyGuard::restore(const std::vector<double>& losses, uint64_t skipped) {
  GT_REQUIRE(losses.size() <= config_.window,
             "anomaly guard window of {} losses is longer than worker.anomaly_guard.window = {}",
             losses.size(), config_.window);
  losses_.assign(losses.begin(), losses.end());
  skipped_ = skipped;
  spike_streak_ = 0;
}

}  // namespace geotrain::worker
