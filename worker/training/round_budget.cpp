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
  // A hair of slack, so that a pace equal to budget / k plans k, not k - 1, when the division
  // rounds below it.
  const double owed = carry_ + budget_s_ / pace_s_ + 1e-9;
  const double whole = std::floor(owed);
  const auto steps = static_cast<uint32_t>(std::clamp(whole, 1.0, double(max_steps_)));
  carry_ = std::clamp(owed - 1e-9 - double(steps), 0.0, 0.999999);
  return steps;
}

}  // namespace geotrain::worker
