// Shard's part of the end of a run (docs/training.md, "The end of a run"): every region's last
// push of the progress it did not push yet, merged once, without the optimizer's momentum, onto
// the mean of what the regions hold.
//
// What a region holds. With a lossy downlink a region's copy is the values it was last sent less
// its downlink residual (error feedback: whatever the downlink has not delivered yet); with an
// fp32 downlink it is the values it last pulled, which are the values when its flush comes (it
// has pulled every round it pushed, and pulls nothing more until the release); they are kept
// with the flush, since a round that regions still push may be released in between (one that
// merged a deferred shard later than the others is a push ahead there). The final model is the
// (merge-weighted) mean of those copies plus lr times the mean of the regions' unsent progress:
//   theta' = mean_r(sent_r - e_r) + lr * mean_r(x_r),
// computed as one merge of x_r + (sent_r - e_r - theta) / lr. Neither residual is added: the
// uplink residual is not pushed at all (worker/leader/region_sync_flush.cpp), the downlink's is
// taken out, because compression error that no region trained with costs the final model (0.01-0.02
// bpb on the LM benchmark, docs/experiments.md). After synchronous rounds every region holds the
// same copy, so the final model is exactly the regions' own parameters. Exact with downlink
// decay 1; with decay the copy is estimated the same way.
//
// Why the outer learning rate and no momentum for the progress: had it been pushed in a round,
// the server would have applied it at lr, in the mean over the regions; the flush applies it so,
// once. Its momentum term would only act on later rounds, and there are none.
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
  Contribution c{region, 0, tokens, std::vector<float>(delta.begin(), delta.end()), {}};
  if (!base_.at(region)) c.held = values_;
  flushes_.push_back(std::move(c));
  return true;
}

void Shard::add_held_offset(Contribution& c) const {
  const auto& kept = base_.at(c.region);
  // An fp32 downlink: the version the region held at its flush, with no residual.
  if (!kept && (!c.held || c.held == values_)) return;
  const ConstFloatSpan sent = kept ? ConstFloatSpan(*kept) : c.held->values();
  const auto e = kept ? downlink_residual(c.region) : ConstFloatSpan{};
  const auto theta = values();
  const float inv_lr = 1.0f / settings_.optimizer.lr;
  bool behind = false;
  for (size_t i = 0; i < theta.size() && !behind; ++i)
    behind = sent[i] != theta[i] || (!e.empty() && e[i] != 0.0f);
  if (!behind) return;
  if (c.delta.empty()) c.delta.assign(theta.size(), 0.0f);
  for (size_t i = 0; i < theta.size(); ++i)
    c.delta[i] += (sent[i] - (e.empty() ? 0.0f : e[i]) - theta[i]) * inv_lr;
}

size_t Shard::release_flush(const std::vector<bool>& live) {
  if (flush_released_ || flushes_.empty()) return 0;
  for (size_t r = 0; r < live.size(); ++r)
    if (live[r] && !flushed(r)) return 0;
  flush_released_ = true;
  const size_t merged = flushes_.size();
  const size_t n = values_->size();
  for (auto& c : flushes_) add_held_offset(c);
  const bool owed = std::any_of(flushes_.begin(), flushes_.end(),
                                [](const Contribution& c) { return !c.delta.empty(); });
  if (owed) {
    // A region that owes nothing and holds the values counts in the mean as zeros.
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
