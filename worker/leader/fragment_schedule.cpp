#include "worker/leader/fragment_schedule.hpp"

#include <algorithm>

namespace geotrain::worker {

uint32_t FragmentSchedule::merge_delay(OverlapMode mode, uint32_t local_steps, uint32_t fragments,
                                       std::optional<uint32_t> written) {
  if (written) return *written;
  if (mode == OverlapMode::off) return 0;
  return local_steps / fragments;  // one round late without fragments
}

StepPosition FragmentSchedule::position(uint64_t step) const {
  return {step, static_cast<uint32_t>((step - 1) % local_steps) + 1, local_steps};
}

bool FragmentSchedule::due(uint64_t step, uint32_t fragment) const {
  const uint64_t lag = uint64_t{fragments - 1 - fragment} * local_steps / fragments;
  return step > 0 && (step + lag) % local_steps == 0;
}

bool FragmentSchedule::due(const StepPosition& at, uint32_t fragment) const {
  const uint64_t lag = uint64_t{fragments - 1 - fragment} * at.round_steps / fragments;
  return at.in_round == at.round_steps - lag;
}

bool FragmentSchedule::any_due(const StepPosition& at) const {
  for (uint32_t p = 0; p < fragments; ++p)
    if (due(at, p)) return true;
  return false;
}

bool FragmentSchedule::changes_after(uint64_t step) const {
  for (uint32_t p = 0; p < fragments; ++p)
    if (due(step, p) || (delay > 0 && step > delay && due(step - delay, p))) return true;
  return false;
}

bool MergeCalendar::changes_after(const StepPosition& at) {
  bool merged = false;
  while (!merges_.empty() && merges_.front().step <= at.step) {
    merges_.pop_front();
    merged = true;
  }
  if (!schedule_.any_due(at)) return merged;
  // A fragment due again before its merge takes its result in first, and those started before
  // it with it (StreamingSync::after_step).
  for (uint32_t p = 0; p < schedule_.fragments; ++p) {
    if (!schedule_.due(at, p)) continue;
    const auto mine = std::find_if(merges_.begin(), merges_.end(),
                                   [p](const Merge& m) { return m.fragment == p; });
    if (mine != merges_.end()) merges_.erase(merges_.begin(), mine + 1);
  }
  if (schedule_.delay > 0)
    for (uint32_t p = 0; p < schedule_.fragments; ++p)
      if (schedule_.due(at, p)) merges_.push_back({at.step + schedule_.delay, p});
  return true;
}

}  // namespace geotrain::worker
