// AnomalyGuard: decides whether a step may touch the parameters.
//
// A step is refused when its gradient holds a NaN or an infinity, when its loss is not finite,
// or when its loss exceeds the mean of the last `window` accepted losses by more than `k_sigma`
// standard deviations (once `min_samples` losses are in the window). A refused step is logged
// (spdlog warning) and counted; its loss does not enter the window, so one spike cannot raise
// the bar for the next. A spike is one step; a loss that stays high is a new level (after a
// merge of the global values, or when a plateau's tight window meets normal noise): after
// `max_consecutive_skips` spikes in a row the guard accepts the step and starts its window
// again from it, so a level shift costs at most that many steps instead of stalling training
// (0: never; every such step is refused, as before 2026-11-25). Non-finite steps are always
// refused and do not count towards the streak. Owns the window; nothing blocks; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "core/span.hpp"

namespace geotrain::worker {

struct AnomalyGuardConfig {
  bool enabled = true;
  size_t window = 50;
  double k_sigma = 6.0;
  size_t min_samples = 10;
  size_t max_consecutive_skips = 4;  // spikes in a row that mark a new loss level; 0: no limit
};

enum class Verdict { kAccept, kNonFiniteGradient, kNonFiniteLoss, kLossSpike };
const char* to_string(Verdict v);

class AnomalyGuard {
 public:
  // InputError when window < 2, min_samples < 2 or > window, or k_sigma <= 0.
  explicit AnomalyGuard(const AnomalyGuardConfig& config);

  // Judges one step (loss: the step's mean loss; grad: the reduced gradient) and records it.
  Verdict check(uint64_t step, double loss, ConstFloatSpan grad);
  // The same, when the gradient lives elsewhere (on a GPU) and only its finiteness is known here
  // (a non-finite squared norm means a NaN or an infinity somewhere in it).
  Verdict check(uint64_t step, double loss, bool gradient_finite);
  uint64_t skipped() const { return skipped_; }
  // The window of accepted losses, oldest first (checkpointed with the worker).
  std::vector<double> losses() const { return {losses_.begin(), losses_.end()}; }
  // Restores a window and the skipped count; InputError when the window is longer than
  // config.window.
  void restore(const std::vector<double>& losses, uint64_t skipped);

 private:
  AnomalyGuardConfig config_;
  std::deque<double> losses_;
  uint64_t skipped_ = 0;
  size_t spike_streak_ = 0;  // spikes refused in a row
};

}  // namespace geotrain::worker
