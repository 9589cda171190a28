// LeaderShard: one shard as a region leader sees it (RegionSync, worker/region_sync.hpp): where
// it lies, its segments (one error-feedback stream each), the version it last pulled, how its
// server counts rounds, and its phase in the exchange. The phase is one value, moved only by the
// methods below (each asserts the phases it may start from), in the way BytePS moves each
// partition through its own list of stages:
//
//   idle --push()--> pushing --push_answered()--> pushed --pull()--> pulling --pulled()--> idle
//        (a pull sent right behind the push: pushing with pull_id; pulled() from there too)
//   pushing / pulling, left in flight when an exchange stops waiting --defer()--> deferred
//   deferred --push_answered(), pull(), pulled()--> merged --hand_back()--> idle
//   its server lost this region --lost()--> needs_resync (deferred_lost when deferred or merged);
//   the full pull after the rejoin --resynced()--> idle (merged when it was deferred)
//   merged --hand_back()--> idle; deferred_lost --hand_back()--> needs_resync (merged, then lost)
//
// `deferred`, `deferred_lost` and `merged` are the caller's deferred shards: their part of base
// has not changed since the exchange that deferred them, and the caller keeps those parameters
// local until hand_back(). ps-lite's push/pull timestamps are the request ids kept here.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/error.hpp"

namespace geotrain::worker {

enum class ShardPhase : uint8_t {
  idle,           // in step with its server: the next exchange of its fragment pushes it
  pushing,        // this exchange pushed it (push_id), and maybe sent its pull behind (pull_id)
  pushed,         // its push answered, its pull not sent yet (its server holds more of our shards)
  pulling,        // its pull sent (pull_id), the push answered
  needs_resync,   // its server lost this region: after the rejoin, a full pull before its next push
  deferred,       // an exchange stopped waiting for it: push_id and/or pull_id still in flight
  deferred_lost,  // deferred, and its server lost this region: what was in flight is gone; the
                  // full pull after the rejoin merges it
  merged,         // deferred, and base holds its server's values again: handed back next
};

const char* shard_phase_name(ShardPhase phase);

struct LeaderShard {
  struct Segment {
    uint64_t offset;  // relative to the shard
    uint64_t count;
    bool critical;
    uint64_t stream;  // EF residual stream id
  };

  uint32_t id = 0;
  uint64_t offset = 0;  // in the flat buffer
  uint64_t count = 0;
  size_t server = 0;     // index into RegionSync's links
  uint64_t version = 0;  // last version pulled
  std::vector<Segment> segments;
  uint32_t fragment = 0;
  // This region's round minus the round its server counts for it (non-zero after the server
  // restarted from an older checkpoint, or after the shard was merged late).
  int64_t round_shift = 0;
  bool zero_start = false;  // hello: its values are still zero, so connect() pulls nothing
  // hello: this region flushed the shard before connect() (a leader restarted after its run's
  // end): flush() does not push it again, and only pulls the global values.
  bool flushed_before = false;
  // Its server holds this region's flush of it (said by a hello, or a flush answered): flush()
  // does not push it again. A server restarted from its checkpoint holds none.
  bool flush_held = false;

  ShardPhase phase() const { return phase_; }
  // The requests of this exchange, or of a deferred one, still unanswered.
  std::optional<uint64_t> push_id() const { return push_id_; }
  std::optional<uint64_t> pull_id() const { return pull_id_; }
  // The round its server counts for the push it was deferred in.
  uint64_t deferred_round() const { return deferred_round_; }
  // The caller's deferred shards: their parameters stay local until hand_back().
  bool deferred() const {
    return phase_ == ShardPhase::deferred || phase_ == ShardPhase::deferred_lost ||
           phase_ == ShardPhase::merged;
  }
  // Requests of a deferred shard are in flight.
  bool in_flight() const { return phase_ == ShardPhase::deferred; }
  // Pushed in this exchange and not yet pulled.
  bool exchanging() const {
    return phase_ == ShardPhase::pushing || phase_ == ShardPhase::pushed ||
           phase_ == ShardPhase::pulling;
  }

  void push(uint64_t request) {
    expect(phase_ == ShardPhase::idle, "push");
    phase_ = ShardPhase::pushing;
    push_id_ = request;
  }
  void push_answered() {
    expect((phase_ == ShardPhase::pushing || phase_ == ShardPhase::deferred) && push_id_,
           "push_answered");
    push_id_.reset();
    if (phase_ == ShardPhase::pushing) phase_ = pull_id_ ? ShardPhase::pulling : ShardPhase::pushed;
  }
  // Its pull sent: right behind its push (pushing), after the push's answer (pushed), or, when
  // deferred, once the push is answered.
  void pull(uint64_t request) {
    expect(phase_ == ShardPhase::pushing || phase_ == ShardPhase::pushed ||
               (phase_ == ShardPhase::deferred && !push_id_ && !pull_id_),
           "pull");
    pull_id_ = request;
    if (phase_ == ShardPhase::pushed) phase_ = ShardPhase::pulling;
  }
  // Its pull's reply is applied to base.
  void pulled(uint64_t version_pulled) {
    expect((exchanging() || phase_ == ShardPhase::deferred) && pull_id_, "pulled");
    version = version_pulled;
    pull_id_.reset();
    if (phase_ == ShardPhase::deferred)
      phase_ = push_id_ ? ShardPhase::deferred : ShardPhase::merged;
    else
      phase_ = push_id_ ? ShardPhase::pushing : ShardPhase::idle;
  }
  // The exchange stops waiting for it; `server_round` is the round its server counts for it.
  void defer(uint64_t server_round) {
    expect(exchanging(), "defer");
    phase_ = ShardPhase::deferred;
    deferred_round_ = server_round;
  }
  // Its server lost this region: its requests will not be answered, and a full pull is due
  // once the server is rejoined (a deferred shard stays deferred until then).
  void lost() {
    push_id_.reset();
    pull_id_.reset();
    phase_ = deferred() ? ShardPhase::deferred_lost : ShardPhase::needs_resync;
  }
  // The full pull after a rejoin is applied to base.
  void resynced(uint64_t version_pulled) {
    expect(phase_ == ShardPhase::needs_resync || phase_ == ShardPhase::deferred_lost, "resynced");
    version = version_pulled;
    phase_ = phase_ == ShardPhase::deferred_lost ? ShardPhase::merged : ShardPhase::idle;
  }
  bool needs_full_pull() const {
    return phase_ == ShardPhase::needs_resync || phase_ == ShardPhase::deferred_lost;
  }
  // A pull applied on a path of its own (connect(), the flush's final pull).
  void set_version(uint64_t version_pulled) { version = version_pulled; }
  // A merged shard goes back to the caller: the next exchange of its fragment pushes it (after a
  // full pull, when its server lost this region since it was merged).
  void hand_back() {
    expect(phase_ == ShardPhase::merged || phase_ == ShardPhase::deferred_lost, "hand_back");
    phase_ = phase_ == ShardPhase::merged ? ShardPhase::idle : ShardPhase::needs_resync;
  }

 private:
  void expect(bool ok, const char* transition) const {
    GT_ASSERT(ok, "shard {}: {}() in phase {}", id, transition, shard_phase_name(phase_));
  }

  ShardPhase phase_ = ShardPhase::idle;
  std::optional<uint64_t> push_id_, pull_id_;
  uint64_t deferred_round_ = 0;
};

inline const char* shard_phase_name(ShardPhase phase) {
  switch (phase) {
    case ShardPhase::idle:
      return "idle";
    case ShardPhase::pushing:
      return "pushing";
    case ShardPhase::pushed:
      return "pushed";
    case ShardPhase::pulling:
      return "pulling";
    case ShardPhase::needs_resync:
      return "needs_resync";
    case ShardPhase::deferred:
      return "deferred";
    case ShardPhase::deferred_lost:
      return "deferred_lost";
    case ShardPhase::merged:
      return "merged";
  }
  return "?";
}

}  // namespace geotrain::worker
