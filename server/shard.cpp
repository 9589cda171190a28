#include "server/shard.hpp"

#include <algorithm>

#include "compression/codecs.hpp"
#include "compression/factory.hpp"
#include "core/error.hpp"

namespace geotrain::server {

float staleness_weight(StalenessWeighting weighting, uint32_t tau) {
  return weighting == StalenessWeighting::inverse ? 1.0f / (1.0f + static_cast<float>(tau)) : 1.0f;
}

Shard::Shard(ShardRange range, std::vector<uint8_t> critical_mask, size_t regions,
             const ShardSettings& settings)
    : range_(range),
      mask_(std::move(critical_mask)),
      settings_(settings),
      values_(range.count, 0.0f),
      momentum_(range.count, 0.0f),
      gate_(regions, settings.staleness_bound),
      base_(regions),
      sent_version_(regions, 0),
      full_codec_(compression::make_fp32_codec()) {
  for (size_t r = 0; r < regions; ++r) {
    const auto& spec = settings.downlink_spec(r);
    auto it = downlinks_.find(spec);
    if (it == downlinks_.end()) it = downlinks_.emplace(spec, compression::make_codec(spec)).first;
    downlink_of_.push_back(&it->second);
  }
  GT_ASSERT(mask_.size() == range.count, "mask size {} != shard size {}", mask_.size(), range.count);
  critical_count_ = static_cast<uint64_t>(std::count(mask_.begin(), mask_.end(), uint8_t{1}));
}

Shard::PushResult Shard::apply_push(size_t region, uint64_t round, ConstFloatSpan delta,
                                    const std::vector<bool>& live) {
  GT_ASSERT(delta.size() == values_.size(), "delta size {} != shard size {}", delta.size(), values_.size());
  GT_ASSERT(round == gate_.clock(region) + 1, "round {} after clock {}", round, gate_.clock(region));
  GT_ASSERT(live.at(region), "push from a dead region {}", region);
  PushResult result;
  result.staleness = gate_.staleness(region, round, live);
  result.weight = staleness_weight(settings_.weighting, result.staleness);

  if (critical_count_ > 0 || values_.empty()) {
    auto& slot = pending_[round];
    slot.resize(live.size());
    slot[region] = std::vector<float>(delta.begin(), delta.end());
  } else {
    pending_[round].resize(live.size());
    pending_[round][region] = std::vector<float>();  // participation only
  }
  if (critical_count_ < values_.size()) {
    const auto n_live = static_cast<float>(std::count(live.begin(), live.end(), true));
    scratch_.resize(values_.size());
    for (size_t i = 0; i < values_.size(); ++i) scratch_[i] = result.weight * delta[i] / n_live;
    outer_step(settings_.optimizer, values_, momentum_, scratch_, mask_, 0);
    ++version_;
  }
  gate_.set_clock(region, round);
  return result;
}

std::vector<Shard::Released> Shard::release_ready(const std::vector<bool>& live) {
  std::vector<Released> out;
  for (;;) {
    auto it = pending_.find(released_round_ + 1);
    if (it == pending_.end()) break;
    auto& slots = it->second;
    bool complete = true;
    size_t contributors = 0;
    for (size_t r = 0; r < live.size(); ++r) {
      if (live[r] && !slots[r]) complete = false;
      if (slots[r]) ++contributors;
    }
    if (!complete || contributors == 0) break;
    if (critical_count_ > 0) {
      // Sum in region order, then divide: independent of arrival order.
      scratch_.assign(values_.size(), 0.0f);
      for (auto& s : slots)
        if (s)
          for (size_t i = 0; i < scratch_.size(); ++i) scratch_[i] += (*s)[i];
      const auto n = static_cast<float>(contributors);
      for (float& x : scratch_) x /= n;
      outer_step(settings_.optimizer, values_, momentum_, scratch_, mask_, 1);
      ++version_;
    }
    ++released_round_;
    out.push_back({released_round_, contributors});
    pending_.erase(it);
  }
  return out;
}

void Shard::rejoin(size_t region) {
  for (auto& [round, slots] : pending_) slots.at(region).reset();
  gate_.set_clock(region, released_round_);
  base_.at(region).reset();
  sent_version_.at(region) = 0;
  downlink_of_.at(region)->reset(region);
}

Bytes Shard::pull_full(size_t region) {
  Bytes out;
  full_codec_->encode(values_, out);
  base_.at(region) = values_;
  sent_version_.at(region) = version_;
  downlink_of_.at(region)->reset(region);
  return out;
}

Bytes Shard::pull_change(size_t region) {
  auto& base = base_.at(region);
  GT_ASSERT(base.has_value(), "pull_change before pull_full for region {}", region);
  scratch_.resize(values_.size());
  for (size_t i = 0; i < values_.size(); ++i) scratch_[i] = values_[i] - (*base)[i];
  Bytes out;
  downlink_of_.at(region)->encode(region, scratch_, out);
  *base = values_;
  sent_version_.at(region) = version_;
  return out;
}

void Shard::restore(uint64_t version, uint64_t released_round, ConstFloatSpan values,
                    ConstFloatSpan momentum) {
  GT_ASSERT(values.size() == values_.size() && momentum.size() == momentum_.size(),
            "restore sizes {} {} for shard of {}", values.size(), momentum.size(), values_.size());
  std::copy(values.begin(), values.end(), values_.begin());
  std::copy(momentum.begin(), momentum.end(), momentum_.begin());
  version_ = version;
  released_round_ = released_round;
  pending_.clear();
  for (size_t r = 0; r < base_.size(); ++r) rejoin(r);
}

}  // namespace geotrain::server
