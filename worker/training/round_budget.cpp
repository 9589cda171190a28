#include "worker/training/round_budget.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace geotrain::worker {

RoundBudget::RoundBudget(double budget_s, uint32_t max_steps, uint32_t first_steps,
                         double known_pace_s)
    : budget_s_(budget_s),
      max_steps_(max_steps),
      first_steps_(std::clamp<uint32_t>(first_steps, 1, std::max<uint32_t>(max_steps, 1))),
      pace_s_(known_pace_s > 0 ? known_pace_s : 0) {
  GT_ASSERT(budget_s > 0 && max_steps >= 1, "round budget {} s, at most {} steps", budget_s,
            max_steps);
}

void RoundBudget::record_step(double seconds) {
  recorded_s_ += std::max(seconds, 0.0);
  ++recorded_;
}

uint32_t RoundBudget::plan() {
  if (recorded_ > 0) pace_s_ = recorded_s_ / recorded_;
  recorded_s_ = 0;
  recorded_ = 0;
  if (pace_s_ <= 0) return first_steps_;
  // The nearest count, the difference carried: over rounds the counts sum to the budget's steps
  // within half a step, and a pace a hair slower than budget / k (a step's own overheads) still
  // plans k.
  const double owed = carry_ + budget_s_ / pace_s_;
  const auto steps = static_cast<uint32_t>(std::clamp(std::round(owed), 1.0, double(max_steps_)));
  carry_ = std::clamp(owed - double(steps), -0.5, 0.4999);
  return steps;
}

}  // namespace geotrain::worker
