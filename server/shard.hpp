// Shard: one contiguous range of the global parameters and everything the server keeps for it.
//
// Owns: the values (one ValueBuffer per version, copy-on-write: server/value_buffer.hpp), the
// outer optimizer's momentum (and, for non-critical elements, each unreleased round's momentum
// accumulator), the shard version (bumped whenever values change), the synchronous
// round counter, the staleness gate's clocks, the critical deltas of rounds not yet released (per
// round: the deltas merged into it, each with its region, own round and tokens, summed in (region,
// round) order at release so the result does not depend on arrival order), and the downlink
// state per region (whether it has values, the version last sent, and for a lossy downlink codec
// the values last sent and that region's ErrorFeedback residual stream).
//
// Downlink codec schedules (ShardSettings::downlink_codec): a region's pull is encoded with its
// schedule's codec of the round the region last pushed this shard (the gate's clock: the round of
// the exchange the pull belongs to, when its push came first, as a leader sends them). At a
// switch the region's residual moves to the new codec's ErrorFeedback (kept, as on the uplink);
// a switch to fp32 sends values (and drops it, as every values pull does). While a lossy phase
// may still come, the values last sent are kept even in an fp32 phase, so that the first change
// pull after it has them to diff against.
//
// Consistency (docs/protocol.md, server/consistency.hpp): critical elements change only when a
// round is released, by the outer optimizer applied to the weighted average of the deltas merged
// into it (ssp: every live region's; quorum: also a quorum's once the grace window expired, plus
// late deltas of rounds released before); non-critical elements change on every push, by the
// optimizer applied to w(tau) * delta / live.
//
// Momentum of non-critical elements (server/outer_optimizer.hpp, "Momentum under asynchrony"):
// it advances once per released round, not per push. A push applies its share of the step at
// once (push_step) and adds its pseudo-gradient to the accumulator of the round it joins (its
// own, or for a late push the oldest unreleased one, as for critical deltas); the round's release
// applies the momentum share (release_step), in round order. So when every live region pushes
// once per round, after each release the values and momentum are exactly those of the
// synchronous step on the round's mean delta, whatever the arrival order. A region that rejoins
// keeps the shares its pushes applied, in the values and in the accumulators alike: the momentum
// follows what the values received. Without momentum nothing is accumulated and the bytes are as
// they were before this split.
// Checkpoints hold the values and the momentum of the released round; the accumulators are not
// saved. restore() starts from the released round (every region rejoins and pushes the rounds
// after it again), so a checkpoint's unreleased rounds are dropped like their critical deltas
// are: the shares their pushes applied stay in the values, their momentum is not carried on. A
// checkpoint written at a release under staleness bound 0 has no such round (no region can push
// round t+1 before round t is released).
//
// Callers validate input first: every method here asserts its preconditions (our bugs).
// Nothing blocks, but a pass split with the PassSplitter waits for its other half; not
// thread-safe (the server's loop thread owns it).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "compression/codec_schedule.hpp"
#include "compression/error_feedback.hpp"
#include "core/span.hpp"
#include "server/consistency.hpp"
#include "server/huge_pages.hpp"
#include "server/outer_optimizer.hpp"
#include "server/pass_splitter.hpp"
#include "server/shard_map.hpp"
#include "server/staleness_gate.hpp"
#include "server/value_buffer.hpp"

namespace geotrain::server {

enum class StalenessWeighting { none, inverse };  // w = 1, or w = 1/(1+tau)

float staleness_weight(StalenessWeighting weighting, uint32_t tau);

struct ShardSettings {
  OuterOptimizerConfig optimizer;
  uint32_t staleness_bound = 0;
  StalenessWeighting weighting = StalenessWeighting::none;
  ConsistencySettings consistency;  // server.consistency: when rounds release, how deltas weigh
  // server.downlink_codec(s): a codec spec, or a schedule of them by round
  // (compression/codec_schedule.hpp), the round being the one the region last pushed the shard.
  compression::CodecSchedule downlink_codec = "fp32";
  std::map<size_t, compression::CodecSchedule> downlink_codec_for;  // region -> its own schedule
  float downlink_feedback_decay = 1.0f;  // server.downlink_error_feedback.decay (1: keep all)

  const compression::CodecSchedule& downlink_schedule(size_t region) const {
    auto it = downlink_codec_for.find(region);
    return it == downlink_codec_for.end() ? downlink_codec : it->second;
  }
};

// What a push says besides its delta.
struct PushMeta {
  uint64_t tokens = 0;  // tokens (samples) the delta represents; 0: unknown
  // When it arrived: the quorum policy's grace window starts at a round's first push.
  std::chrono::steady_clock::time_point at{};
};

class Shard {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // `pieces`: the shard's tensors' pieces, in order (ParamTable::pieces), for a downlink codec
  // that factorises matrices (powersgd); empty: the shard is one flat span.
  Shard(ShardRange range, std::vector<uint8_t> critical_mask, size_t regions,
        const ShardSettings& settings, std::vector<compression::SpanPiece> pieces = {});

  const ShardRange& range() const { return range_; }
  StalenessGate& gate() { return gate_; }
  const StalenessGate& gate() const { return gate_; }
  uint64_t version() const { return version_; }
  uint64_t released_round() const { return released_round_; }
  ConstFloatSpan values() const { return values_->values(); }
  // The outer momentum as of the last released round (non-critical elements included: a push's
  // momentum share waits in its round's accumulator until the release).
  ConstFloatSpan momentum() const { return momentum_; }
  const std::vector<uint8_t>& critical_mask() const { return mask_; }
  bool has_critical() const { return critical_count_ > 0; }

  struct PushResult {
    uint32_t staleness = 0;
    float weight = 1.0f;
    bool late = false;  // its round was released already: the critical part joins the next merge
  };
  // Records region's delta for `round` (must be clock+1 and admitted by the gate): applies the
  // non-critical part now, keeps the critical part until the round is released (a late push's,
  // until the oldest unreleased round is). `delta` may be a view into the push's payload frame;
  // it is read, never kept. The caller checked that every element is finite.
  PushResult apply_push(size_t region, uint64_t round, ConstFloatSpan delta,
                        const std::vector<bool>& live, PushMeta meta = {});

  // apply_push in two halves, so that the caller can check the delta while the shard computes
  // from it (on the splitter's thread, for a shard of kSplitElements or more with a splitter;
  // otherwise the computing waits for commit()). The caller must keep `delta` valid and
  // unchanged, and must not use the shard, until the StagedPush is committed or destroyed.
  // Destroyed without commit(), it waits for the other thread and drops the push: the shard is
  // as it was. One staged push at a time.
  class StagedPush {
   public:
    StagedPush(const StagedPush&) = delete;
    StagedPush& operator=(const StagedPush&) = delete;
    ~StagedPush();
    // What commit() will report (the staleness and its weight), known from the start.
    PushResult result() const;
    // Finishes and commits the push: apply_push's effect.
    PushResult commit();

   private:
    friend class Shard;
    explicit StagedPush(Shard& shard) : shard_(&shard) {}
    Shard* shard_;  // null once committed
  };
  [[nodiscard]] StagedPush start_push(size_t region, uint64_t round, ConstFloatSpan delta,
                                      const std::vector<bool>& live, PushMeta meta = {});

  // The latest round a counted (`live`) region has pushed or sat out through: the largest clock.
  uint64_t frontier(const std::vector<bool>& live) const {
    uint64_t f = released_round_;
    for (size_t r = 0; r < live.size(); ++r)
      if (live[r]) f = std::max(f, gate_.clock(r));
    return f;
  }

  // Whether the gate admits a push of `round` now (ssp: StalenessGate::admits; quorum: counted
  // from max(slowest live clock, released round)).
  bool admits(uint64_t round, const std::vector<bool>& live) const;

  struct Released {
    uint64_t round = 0;
    size_t contributors = 0;  // deltas merged: one per on-time region, plus the late ones
    size_t late = 0;          // of which late deltas of rounds released before
  };
  // Releases, in order, every round that all live regions have pushed, and under the quorum
  // policy every round that a quorum has pushed and whose grace window expired by `now`.
  std::vector<Released> release_ready(const std::vector<bool>& live, TimePoint now = {});
  // The live regions (but `pusher`) that a pull naming `round` still waits for: round -
  // staleness_bound is not released and their clocks have not reached it (they neither pushed
  // it nor sat it out). None under the quorum policy, whose grace window releases a round
  // without them.
  std::vector<size_t> holding_back(uint64_t round, const std::vector<bool>& live,
                                   size_t pusher) const;
  // Quorum policy: when the oldest unreleased round will be released by its grace window expiring
  // (it has a quorum); none otherwise. The server's loop wakes up then.
  std::optional<TimePoint> grace_deadline() const;

  // The region sits out the rounds after its clock up to `last` (a push that skips them,
  // wire::Push::skip): its clock moves to `last`, so that it holds none of them back, and it
  // contributes nothing to them (no delta, no quorum vote). A round is complete when every live
  // region's clock has reached it; one that every live region sat out is released without a step
  // (no new version). Returns how many unreleased rounds it sat out.
  uint64_t sit_out(size_t region, uint64_t last);

  // A region (re)joins: its pending deltas are dropped, its clock restarts at the last released
  // round, and it must pull full values before it can pull changes.
  void rejoin(size_t region);

  // Called after rejoin(): while the values are still the zeros every shard starts from (version
  // 0: no delta applied, no checkpoint restored), starts the region's downlink from them as a
  // full pull would, so that the region need not pull zeros. Returns whether it did.
  bool start_downlink_from_zero(size_t region);

  bool has_downlink(size_t region) const { return pulled_.at(region); }
  uint64_t sent_version(size_t region) const { return sent_version_.at(region); }

  // What a pull sends: the values themselves for a full pull, and for every pull of a region
  // whose downlink codec is fp32 (lossless, so the values say exactly what the change would, and
  // the region's copy ends bit-identical to the shard's); otherwise the change.
  bool pull_sends_values(size_t region, bool full) const;
  // The current values as a sealed fp32 payload, shared without a copy; (re)starts the region's
  // downlink from them.
  std::shared_ptr<const ValueBuffer> pull_values(size_t region);
  // Lossy downlink codecs only: the payload of (values - values last sent) + residual, with the
  // region's error feedback, into `out` (resized).
  void pull_change(size_t region, Bytes& out);
  // The payload size of the region's next change pull (an upper bound for codecs of variable
  // size), so that the caller can hand pull_change() a buffer that needs no resizing.
  size_t change_bytes(size_t region) const;
  // The payload bytes a pull sends, copied (tests and tools).
  Bytes pull_copy(size_t region, bool full);
  // The region's downlink error-feedback residual (empty before its first change pull).
  ConstFloatSpan downlink_residual(size_t region) const {
    return downlink_of_.at(region)->residual(region);
  }
  // The codec of the region's next pull (its schedule's, at the round it last pushed).
  const compression::Codec& downlink_codec(size_t region) const {
    return scheduled_downlink(region).codec();
  }

  // Lets the optimizer's pass over a large shard run half on the splitter's thread
  // (server/pass_splitter.hpp); borrowed, must outlive the shard or be reset.
  void set_splitter(PassSplitter* splitter) { splitter_ = splitter; }

  // Checkpoint restore: values and momentum must have the shard's size.
  void restore(uint64_t version, uint64_t released_round, ConstFloatSpan values,
               ConstFloatSpan momentum);

  // The end of a run (docs/training.md, "The end of a run"; server/shard_flush.cpp). A region's
  // flush: the progress it did not push yet, `delta`, empty when none (its uplink residual is
  // not part of it). Kept until release_flush(); once that released
  // (the region was not counted then: declared dead, or back too late) it is dropped and false
  // returned, so that every region that pulls after the release gets the same values. A region
  // flushes a shard once (the caller refuses a second flush). With an fp32 downlink the region
  // holds the values as they are now (it has pulled every round it pushed): kept with the
  // flush, since rounds the others still push may be released before the flush is.
  bool add_flush(size_t region, ConstFloatSpan delta, uint64_t tokens);
  bool flushed(size_t region) const { return region < flushed_.size() && flushed_[region]; }
  bool flush_released() const { return flush_released_; }
  // Once every live region has flushed (and one has): theta = the mean of what the regions hold
  // (the values less each region's downlink residual) + lr * the flushes, merged as a round's
  // critical deltas are (their mean, or weighted by tokens), on every element, as one new version
  // (none when every flush was empty and every region holds the values). The momentum, the rounds
  // and the gate stay as they are. Returns how many flushes it merged when it released now, 0
  // otherwise.
  size_t release_flush(const std::vector<bool>& live);

 private:
  // A push between start_push and commit.
  struct Staged {
    size_t region = 0;
    uint64_t round = 0;
    uint64_t merge_round = 0;  // the round it joins: its own, or if late the oldest unreleased
    PushMeta meta;
    std::vector<bool> live;
    PushResult result;
    float live_count = 0;
    ConstFloatSpan delta;
    ConstFloatSpan accumulator;         // merge_round's momentum accumulator so far (empty: none)
    std::vector<float> kept;            // the critical part's copy (see apply_push)
    std::shared_ptr<ValueBuffer> next;  // the next version, when the push changes values
    FloatSpan out;                      // next's values, while it is being filled
    bool computed = false;
    // While the splitter's thread fills `next` front to back, this thread may step blocks from
    // the back (help_staged); a block is stepped by whichever thread claims it first.
    std::unique_ptr<std::atomic<uint8_t>[]> claims;
    std::unique_ptr<SplitTask> on_splitter;  // computing on the splitter's thread
  };
  // Stages a push; `on_splitter`: its computing starts now, on the splitter's thread.
  StagedPush stage(size_t region, uint64_t round, ConstFloatSpan delta,
                   const std::vector<bool>& live, PushMeta meta, bool on_splitter);
  // Computes staged_'s copy and next version; `splitter` may take half of the step.
  void compute_staged(PassSplitter* splitter);
  // The optimizer's step over next's values [begin, begin + out.size()).
  void step_staged(size_t begin, FloatSpan out);
  // Steps blocks from the back while the splitter's thread fills from the front.
  void help_staged();
  void commit_staged();
  // Makes `next` the current version.
  void commit(std::shared_ptr<ValueBuffer> next);
  bool has_momentum() const { return settings_.optimizer.momentum != 0.0f; }
  // Non-critical elements with momentum: their step is split into push_step and release_step.
  bool splits_momentum() const { return has_momentum() && critical_count_ < values_->size(); }

  ShardRange range_;
  std::vector<uint8_t> mask_;  // 1 = critical element
  uint64_t critical_count_ = 0;
  ShardSettings settings_;
  ValueBufferPool pool_;
  std::shared_ptr<ValueBuffer> values_;  // the current version: sealed, never written again
  bool header_on_fill_ = true;           // versions hash their payload header as they are written
  ShardBuffer momentum_;
  ShardBuffer momentum_next_;     // the next version's, while a release computes it
  ShardBuffer accumulator_next_;  // a staged push's next accumulator (splits_momentum())
  uint64_t version_ = 0;
  uint64_t released_round_ = 0;
  StalenessGate gate_;
  // A delta waiting for its merge: the critical part's copy (empty for a shard without critical
  // elements), from `region`'s push of `round` (earlier than the merge's round when late).
  struct Contribution {
    size_t region = 0;
    uint64_t round = 0;
    uint64_t tokens = 0;
    std::vector<float> delta;
    // A flush over an fp32 downlink: the version of the values when it came, which the region
    // held then (its copy is not kept otherwise; versions are never written once published, so
    // this is no copy); null when none.
    std::shared_ptr<ValueBuffer> held;
  };
  // Adds to a region's flush what its copy differs from the values by, over lr (a lossy
  // downlink's sent values less its residual; an fp32 downlink's values at the flush).
  void add_held_offset(Contribution& c) const;
  struct PendingRound {
    std::vector<bool> pushed;  // per region: pushed this round in time (late deltas do not count)
    std::vector<Contribution> deltas;
    std::optional<TimePoint> first_push;  // the first in-time push: the grace window starts here
    // splits_momentum(): the sum of the pseudo-gradients its pushes applied to non-critical
    // elements (push_step's accumulator); empty before its first push.
    ShardBuffer accumulator;
  };
  PendingRound& pending_round(uint64_t round);
  // A release's step, one new version: the critical elements' step on the merged deltas, and
  // the momentum share of the non-critical ones. Nothing to do (and no new version) without
  // critical elements or momentum.
  void release(PendingRound& round);
  // The critical step's input: the weighted sum of `deltas` into scratch_; returns its divisor
  // (server/consistency.hpp).
  float merge(std::vector<Contribution>& deltas);
  std::map<uint64_t, PendingRound> pending_;      // unreleased rounds
  std::vector<bool> pulled_;                      // has values since it (re)joined
  std::vector<std::optional<ShardBuffer>> base_;  // lossy downlink: values last sent
  std::vector<uint64_t> sent_version_;
  // One ErrorFeedback per distinct downlink codec spec (of every phase of every region's
  // schedule); its stream `region` is that region's residual, so every region has exactly one
  // stream whatever codec it uses.
  std::map<std::string, compression::ErrorFeedback> downlinks_;
  // Per region, into downlinks_: the one holding its residual (the codec of its last change pull,
  // or its first phase's).
  std::vector<compression::ErrorFeedback*> downlink_of_;
  // The region's schedule's codec spec now (at its gate clock), and its ErrorFeedback.
  const std::string& downlink_spec_now(size_t region) const;
  const compression::ErrorFeedback& scheduled_downlink(size_t region) const {
    return downlinks_.at(downlink_spec_now(region));
  }
  // Whether the region's downlink may still send changes (a lossy phase now or later): then a
  // values pull keeps what it sent.
  bool keeps_sent_values(size_t region) const;
  ShardBuffer scratch_;
  std::vector<compression::SpanPiece> pieces_;  // the tensors' pieces; empty: one span
  PassSplitter* splitter_ = nullptr;
  std::optional<Staged> staged_;
  // The end of a run: per region, whether it flushed (sized at the first flush); the flushes
  // until the release (round 0; an empty delta owes nothing).
  std::vector<bool> flushed_;
  std::vector<Contribution> flushes_;
  bool flush_released_ = false;
};

}  // namespace geotrain::server
