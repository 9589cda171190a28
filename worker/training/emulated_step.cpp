#include "worker/training/emulated_step.hpp"

#include <utility>

namespace geotrain::worker {

EmulatedStepTime::EmulatedStepTime(double step_ms, std::vector<Slowdown> slowdowns)
    : step_s_(step_ms / 1e3), slowdowns_(std::move(slowdowns)) {}

double EmulatedStepTime::target_s(double since_start_s) const {
  double t = step_s_;
  for (const auto& s : slowdowns_)
    if (since_start_s >= s.from_s && since_start_s < s.until_s) t *= s.factor;
  return t;
}

double EmulatedStepTime::pad_s(double elapsed_s, double since_start_s) {
  if (!on()) return 0;
  const double left = target_s(since_start_s) - elapsed_s;
  if (left >= 0) return left;
  ++overruns_;
  return 0;
}

}  // namespace geotrain::worker
