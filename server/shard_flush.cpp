// Shard's part of the end of a run (docs/training.md, "The end of a run"): every region's last
// push of what error feedback still holds, merged once, without the optimizer's momentum.
//
// Why the outer learning rate and no momentum: a region's residual is part of deltas it already
// pushed, that the server never received. Had it arrived with them, the server would have applied
// it at lr, in the mean over the regions; the flush applies it so, once. Its momentum term would
// only act on later rounds, and there are none: stepping the momentum here would instead add one
// more momentum step (lr * mu * m) that no region trained for. With lr 1 and no momentum this is
// theta += mean over the regions of e_r, exactly the deltas' missing part.
#include <algorithm>

#include "core/error.hpp"
#include "server/shard.hpp"

namespace geotrain::server {

bool Shard::add_flush(size_t region, ConstFloatSpan delta, uint64_t tokens) {
  GT_ASSERT(!staged_, "add_flush while a push is staged");
  GT_ASSERT(delta.empty() || delta.size() == values_->size(), "flush of {} elements, shard of {}",
            delta.size(), values_->size());
  if (flushed_.empty()) flushed_.assign(gate_.clocks().size(), false);
  GT_ASSERT(!flushed_.at(region), "region {} flushed shard {} twice", region, range_.id);
  flushed_[region] = true;
  if (flush_released_) return false;
  flushes_.push_back({region, 0, tokens, std::vector<float>(delta.begin(), delta.end())});
  return true;
}

size_t Shard::release_flush(const std::vector<bool>& live) {
  if (flush_released_ || flushes_.empty()) return 0;
  for (size_t r = 0; r < live.size(); ++r)
    if (live[r] && !flushed(r)) return 0;
  flush_released_ = true;
  const size_t merged = flushes_.size();
  const bool owed = std::any_of(flushes_.begin(), flushes_.end(),
                                [](const Contribution& c) { return !c.delta.empty(); });
  if (owed) {
    // A region that owed nothing counts in the mean as zeros.
    const size_t n = values_->size();
    for (auto& c : flushes_)
      if (c.delta.empty()) c.delta.assign(n, 0.0f);
    const float divisor = merge(flushes_);
    OuterOptimizerConfig plain = settings_.optimizer;
    plain.momentum = 0.0f;
    plain.nesterov = false;
    auto next = pool_.acquire();
    next->fill(
        [&](size_t begin, FloatSpan block) {
          const size_t count = block.size();
          outer_step(plain, values_->values().subspan(begin, count), {},
                     ConstFloatSpan(scratch_).subspan(begin, count), {}, 0, {1.0f, divisor}, block,
                     {});
        },
        splitter_, header_on_fill_);
    commit(std::move(next));
  }
  flushes_.clear();
  flushes_.shrink_to_fit();
  return merged;
}

}  // namespace geotrain::server
