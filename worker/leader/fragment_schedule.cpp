#include "worker/leader/fragment_schedule.hpp"

namespace geotrain::worker {

uint32_t FragmentSchedule::merge_delay(OverlapMode mode, uint32_t local_steps, uint32_t fragments,
                                       std::optional<uint32_t> written) {
  if (written) return *written;
  if (mode == OverlapMode::off) return 0;
  return local_steps / fragments;  // one round late without fragments
}

bool FragmentSchedule::due(uint64_t step, uint32_t fragment) const {
  const uint64_t lag = uint64_t{fragments - 1 - fragment} * local_steps / fragments;
  return step > 0 && (step + lag) % local_steps == 0;
}

bool FragmentSchedule::changes_after(uint64_t step) const {
  for (uint32_t p = 0; p < fragments; ++p)
    if (due(step, p) || (delay > 0 && step > delay && due(step - delay, p))) return true;
  return false;
}

}  // namespace geotrain::worker
