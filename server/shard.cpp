#include "server/shard.hpp"

#include <algorithm>

#include "compression/codecs.hpp"
#include "compression/factory.hpp"
#include "core/error.hpp"
#include "server/shard_kernels.hpp"

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
  GT_ASSERT(mask_.size() == range.count, "mask size {} != shard size {}", mask_.size(),
            range.count);
  critical_count_ = static_cast<uint64_t>(std::count(mask_.begin(), mask_.end(), uint8_t{1}));
}

Shard::PushResult Shard::apply_push(size_t region, uint64_t round, ConstFloatSpan delta,
                                    const std::vector<bool>& live) {
  GT_ASSERT(delta.size() == values_.size(), "delta size {} != shard size {}", delta.size(),
            values_.size());
  GT_ASSERT(round == gate_.clock(region) + 1, "round {} after clock {}", round,
            gate_.clock(region));
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
    // w(tau) * delta / live, folded into the optimizer's pass; without critical elements the
    // mask selects everything and the step runs unmasked.
    const auto n_live = static_cast<float>(std::count(live.begin(), live.end(), true));
    const auto mask =
        critical_count_ > 0 ? std::span<const uint8_t>(mask_) : std::span<const uint8_t>();
    auto step = [&](size_t begin, size_t end) {
      const size_t count = end - begin;
      outer_step(settings_.optimizer, FloatSpan(values_).subspan(begin, count),
                 FloatSpan(momentum_).subspan(begin, count), delta.subspan(begin, count),
                 mask.empty() ? mask : mask.subspan(begin, count), 0, {result.weight, n_live});
    };
    const size_t n = values_.size();
    if (splitter_ != nullptr && n >= kSplitElements) {
      // Halves on two threads; the split is a multiple of 16 elements, so no 64-byte line of
      // values or momentum is written by both.
      const size_t half = n / 2 / 16 * 16;
      splitter_->start([&] { step(half, n); });
      step(0, half);
      splitter_->wait();
    } else {
      step(0, n);
    }
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
      // The division by the contributors happens in the optimizer's pass: 1 * sum / n.
      outer_step(settings_.optimizer, values_, momentum_, scratch_, mask_, 1,
                 {1.0f, static_cast<float>(contributors)});
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

size_t Shard::pull_bytes(size_t region, bool full) const {
  const auto& codec = full ? *full_codec_ : downlink_of_.at(region)->codec();
  return codec.max_payload_bytes(values_.size());
}

void Shard::pull_full(size_t region, Bytes& out) {
  full_codec_->encode(values_, out);
  base_.at(region) = values_;
  sent_version_.at(region) = version_;
  downlink_of_.at(region)->reset(region);
}

void Shard::pull_change(size_t region, Bytes& out) {
  auto& base = base_.at(region);
  GT_ASSERT(base.has_value(), "pull_change before pull_full for region {}", region);
  auto& downlink = *downlink_of_.at(region);
  const size_t n = values_.size();
  if (downlink.codec().id() == compression::CodecId::fp32 &&
      downlink.residual(region).size() == n) {
    // Lossless downlink, after the region's first change pull. The fp32 error-feedback step
    // sends x = g + e and sets e to +0 (kernels/codec_cpu fp32_encode), and nothing else writes
    // this residual, so it is +0 everywhere here: the step is out = g + 0.0f with e unchanged.
    // Done in one pass with g = values - sent and sent = values, straight into the payload,
    // each block hashed for the checksum while it is in cache. Tests hold this path to the
    // generic one, byte for byte and residual for residual.
    out.resize(compression::kHeaderBytes + 4 * n);
    GT_ASSERT(
        reinterpret_cast<uintptr_t>(out.data() + compression::kHeaderBytes) % alignof(float) == 0,
        "misaligned payload body");
    compression::PayloadHeader h;
    h.codec = compression::CodecId::fp32;
    h.elements = n;
    const ConstFloatSpan values = values_;
    const FloatSpan sent = *base;
    const FloatSpan body(reinterpret_cast<float*>(out.data() + compression::kHeaderBytes), n);
    // A large shard: the splitter's thread computes the second half while this one computes and
    // hashes the first; the hash of the second half waits for it. The split is a multiple of a
    // checksum block, so one block starts exactly there.
    constexpr size_t kBlockElements = compression::kChecksumBlock / sizeof(float);
    size_t split = n;
    bool waited = true;
    if (splitter_ != nullptr && n >= kSplitElements) {
      split = n / 2 / kBlockElements * kBlockElements;
      waited = false;
      splitter_->start([&, split] {
        take_change_fp32(values.subspan(split), sent.subspan(split), body.subspan(split));
      });
    }
    compression::write_payload(h, out, [&](size_t offset, ByteSpan block) {
      const size_t at = offset / sizeof(float), count = block.size() / sizeof(float);
      if (at >= split) {
        if (!waited) splitter_->wait();
        waited = true;
        return;
      }
      take_change_fp32(values.subspan(at, count), sent.subspan(at, count), body.subspan(at, count));
    });
    if (!waited) splitter_->wait();
  } else {
    // TODO(perf): a codec entry point taking values and sent instead of g would fuse this pass
    // into the error-feedback encode (x = (values - sent) + e), one pass fewer for lossy codecs.
    scratch_.resize(n);
    take_change(values_, *base, scratch_);
    downlink.encode(region, scratch_, out);
  }
  sent_version_.at(region) = version_;
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
