#include "worker/leader/shard_wait.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"

namespace geotrain::worker {

ShardWait::ShardWait(std::chrono::milliseconds configured, bool adaptive,
                     std::chrono::milliseconds ceiling)
    : ceiling_(ceiling), current_(configured), adaptive_(adaptive) {
  GT_ASSERT(!adaptive || ceiling >= kFloor, "shard wait ceiling {} ms below the floor",
            ceiling.count());
}

void ShardWait::healthy_exchange(double seconds) {
  if (!adaptive_ || !(seconds >= 0) || !std::isfinite(seconds)) return;
  recent_.push_back(seconds);
  if (recent_.size() > kWindow) recent_.pop_front();
  if (recent_.size() < kWarmup) return;
  std::vector<double> sorted(recent_.begin(), recent_.end());
  const auto at = static_cast<size_t>(std::ceil(0.9 * static_cast<double>(sorted.size()))) - 1;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(at), sorted.end());
  const auto wait = std::chrono::milliseconds(std::llround(kMultiple * sorted[at] * 1e3));
  current_ = std::clamp(wait, kFloor, ceiling_);
}

}  // namespace geotrain::worker
