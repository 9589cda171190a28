// AnomalyGuard: decides whether a step may touch the parameters.
//
// A step is refused when its gradient holds a NaN or an infinity, when its loss is not finite,
// or when its loss exceeds the mean of the last `window` accepted losses by more than `k_sigma`
// standard deviations (once `min_samples` losses are in the window). A refused step is logged
// (spdlog warning) and counted; its loss does not enter the window, so one spike cannot raise
// the bar for the next. Owns the window; nothing blocks; not thread-safe.
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
};

}  // namespace geotrain::worker
