// Shard: one contiguous range of the global parameters and everything the server keeps for it.
//
// Owns: the values, the outer optimizer's momentum, the shard version (bumped whenever values
// change), the synchronous round counter, the staleness gate's clocks, the critical deltas of
// rounds not yet released (one per region, summed in region order at release so the result does
// not depend on arrival order), and the downlink state per region (the values last sent and the
// ErrorFeedback residual stream of that region, with the region's downlink codec).
//
// Consistency (docs/protocol.md): critical elements change only when a round is released, by the
// outer optimizer applied to the average of the live regions' deltas for that round;
// non-critical elements change on every push, by the optimizer applied to w(tau) * delta / live.
// Callers validate input first: every method here asserts its preconditions (our bugs).
// Nothing blocks, but a pass split with the PassSplitter waits for its other half; not
// thread-safe (the server's loop thread owns it).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "compression/error_feedback.hpp"
#include "core/span.hpp"
#include "server/huge_pages.hpp"
#include "server/outer_optimizer.hpp"
#include "server/pass_splitter.hpp"
#include "server/shard_map.hpp"
#include "server/staleness_gate.hpp"

namespace geotrain::server {

enum class StalenessWeighting { none, inverse };  // w = 1, or w = 1/(1+tau)

float staleness_weight(StalenessWeighting weighting, uint32_t tau);

struct ShardSettings {
  OuterOptimizerConfig optimizer;
  uint32_t staleness_bound = 0;
  StalenessWeighting weighting = StalenessWeighting::none;
  std::string downlink_codec = "fp32";
  std::map<size_t, std::string> downlink_codec_for;  // region -> spec overriding downlink_codec

  const std::string& downlink_spec(size_t region) const {
    auto it = downlink_codec_for.find(region);
    return it == downlink_codec_for.end() ? downlink_codec : it->second;
  }
};

class Shard {
 public:
  Shard(ShardRange range, std::vector<uint8_t> critical_mask, size_t regions,
        const ShardSettings& settings);

  const ShardRange& range() const { return range_; }
  StalenessGate& gate() { return gate_; }
  const StalenessGate& gate() const { return gate_; }
  uint64_t version() const { return version_; }
  uint64_t released_round() const { return released_round_; }
  ConstFloatSpan values() const { return values_; }
  FloatSpan values() { return values_; }
  ConstFloatSpan momentum() const { return momentum_; }
  const std::vector<uint8_t>& critical_mask() const { return mask_; }
  bool has_critical() const { return critical_count_ > 0; }

  struct PushResult {
    uint32_t staleness = 0;
    float weight = 1.0f;
  };
  // Records region's delta for `round` (must be clock+1 and admitted by the gate): applies the
  // non-critical part now, keeps the critical part until the round is released. `delta` may be
  // a view into the push's payload frame; it is read, never kept. The caller checked that every
  // element is finite.
  PushResult apply_push(size_t region, uint64_t round, ConstFloatSpan delta,
                        const std::vector<bool>& live);

  struct Released {
    uint64_t round = 0;
    size_t contributors = 0;
  };
  // Releases, in order, every round that all live regions have pushed.
  std::vector<Released> release_ready(const std::vector<bool>& live);

  // A region (re)joins: its pending deltas are dropped, its clock restarts at the last released
  // round, and it must pull full values before it can pull changes.
  void rejoin(size_t region);

  bool has_downlink(size_t region) const { return base_.at(region).has_value(); }
  uint64_t sent_version(size_t region) const { return sent_version_.at(region); }
  // fp32 payload of the current values into `out` (resized); restarts the region's downlink stream.
  void pull_full(size_t region, Bytes& out);
  // Payload of (values - values last sent) + residual, with the region's error feedback, into
  // `out` (resized).
  void pull_change(size_t region, Bytes& out);
  Bytes pull_full(size_t region) {
    Bytes out;
    pull_full(region, out);
    return out;
  }
  Bytes pull_change(size_t region) {
    Bytes out;
    pull_change(region, out);
    return out;
  }
  // The payload size of the region's next pull (an upper bound for codecs of variable size), so
  // that the caller can hand pull_*() a buffer that needs no resizing.
  size_t pull_bytes(size_t region, bool full) const;
  // The region's downlink error-feedback residual (empty before its first change pull).
  ConstFloatSpan downlink_residual(size_t region) const {
    return downlink_of_.at(region)->residual(region);
  }
  const compression::Codec& downlink_codec(size_t region) const {
    return downlink_of_.at(region)->codec();
  }

  // Lets the push's optimizer pass and the fp32 pull pass of a large shard run half on the
  // splitter's thread (server/pass_splitter.hpp); borrowed, must outlive the shard or be reset.
  void set_splitter(PassSplitter* splitter) { splitter_ = splitter; }

  // Checkpoint restore: values and momentum must have the shard's size.
  void restore(uint64_t version, uint64_t released_round, ConstFloatSpan values,
               ConstFloatSpan momentum);

 private:
  ShardRange range_;
  std::vector<uint8_t> mask_;  // 1 = critical element
  uint64_t critical_count_ = 0;
  ShardSettings settings_;
  ShardBuffer values_;
  ShardBuffer momentum_;
  uint64_t version_ = 0;
  uint64_t released_round_ = 0;
  StalenessGate gate_;
  // round -> per region critical delta (empty optional: not pushed yet)
  std::map<uint64_t, std::vector<std::optional<std::vector<float>>>> pending_;
  std::vector<std::optional<ShardBuffer>> base_;  // downlink: values last sent
  std::vector<uint64_t> sent_version_;
  // One ErrorFeedback per distinct downlink codec spec; its stream `region` is that region's
  // residual, so every region has exactly one stream whatever codec it uses.
  std::map<std::string, compression::ErrorFeedback> downlinks_;
  std::vector<compression::ErrorFeedback*> downlink_of_;  // per region, into downlinks_
  std::unique_ptr<compression::Codec> full_codec_;
  ShardBuffer scratch_;
  PassSplitter* splitter_ = nullptr;
};

}  // namespace geotrain::server
