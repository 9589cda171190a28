// LeaderShard: one shard of the global model as a region leader exchanges it, a task with its own
// state (DESIGN.md, "The leader as per-shard tasks"; BytePS moves each partition through its own
// stages): where it lies, its slice of the region's view of the global model (base), its
// segments (one error-feedback stream each, encoded through the region's Uplink), the version it
// last pulled, how its server counts rounds, its phase and the requests it has in flight.
// RegionSync (worker/leader/region_sync.hpp) sends its requests and hands it the replies of its
// server (take()): what a reply means, and whether the shard is late, is known here only.
//
// The phase is one value, moved only by the transitions below (each asserts the phases it may
// start from):
//
//   idle --push()--> pushing --push_answered()--> pushed --pull()--> pulling --pulled()--> idle
//        (a pull sent right behind the push: pushing with pull_id; pulled() from there too, and
//        push_answered() then ends the exchange: idle)
//   pushing / pulling, left in flight when an exchange stops waiting --defer()--> deferred
//   deferred --push_answered(), pull(), pulled()--> merged --hand_back()--> idle
//   its server lost this region --lost()--> needs_resync (deferred_lost when deferred or merged);
//   needs_resync, its server still away when an exchange stops waiting --defer_lost()-->
//   deferred_lost;
//   the full pull after the rejoin --resynced()--> idle (merged when it was deferred)
//   merged --hand_back()--> idle; deferred_lost --hand_back()--> needs_resync (merged, then lost)
//   idle --flush()--> flushing --push_answered()--> idle (its server holds its flush)
//
// `deferred`, `deferred_lost` and `merged` are the caller's deferred shards: their part of base
// has not changed since the exchange that deferred them, and the caller keeps those parameters
// local until hand_back(). Full pulls (connect(), a rejoin, the flush's final pull) go out with
// full_pull() and come back through take() like every other reply. ps-lite's push/pull
// timestamps are the request ids kept here.
//
// Not thread-safe: RegionSync's thread. Buffers: base, origin and the region's tensor motion are
// borrowed (bind()).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compression/codec.hpp"
#include "core/error.hpp"
#include "core/fragments.hpp"
#include "core/param_table.hpp"
#include "core/span.hpp"
#include "wire/messages.hpp"
#include "worker/leader/tensor_motion.hpp"

namespace geotrain::worker {

class Uplink;  // worker/leader/uplink.hpp

enum class ShardPhase : uint8_t {
  idle,           // in step with its server: the next exchange of its fragment pushes it
  pushing,        // this exchange pushed it (push_id), and maybe sent its pull behind (pull_id)
  pushed,         // its push answered, its pull not sent yet
  pulling,        // its pull sent (pull_id), the push answered
  needs_resync,   // its server lost this region: after the rejoin, a full pull before its next push
  deferred,       // an exchange stopped waiting for it: push_id and/or pull_id still in flight
  deferred_lost,  // deferred, and its server lost this region: what was in flight is gone; the
                  // full pull after the rejoin merges it
  merged,         // deferred, and base holds its server's values again: handed back next
  flushing,       // its flush push sent (push_id): the end of a run
};

const char* shard_phase_name(ShardPhase phase);

// What a full pull is for: the values at connect(), after a rejoin (the server's rounds mapped
// again), or the global model after the flush.
enum class FullPull : uint8_t { start, resync, final };

// What the replies handed to shards moved, for RegionSync's reports.
struct ShardTally {
  uint64_t bytes_pulled = 0;   // payload bytes of the pull replies
  uint32_t max_staleness = 0;  // the largest staleness a server reported for our pushes
  uint64_t gate_wait_us = 0;   // the longest time a push waited at a server's gate
  // Shards deferred without a wait: their server held the round for a region silent there
  // (RegionSync::await_round).
  uint32_t held_for_silent = 0;
  // The oldest round released among the pulled shards, in this region's count (UINT64_MAX: none).
  uint64_t released = UINT64_MAX;
};

// How a leader cuts a shard into segments (one payload and error-feedback stream each): runs of
// tensors of one class (the default), one per tensor (worker.chunk_align: tensor), or one per
// tensor piece, a matrix's whole rows apart from a partial row a shard's bound cuts (a codec
// that factorises matrices: powersgd).
enum class Segments { per_class, per_tensor, per_matrix_rows };

class LeaderShard {
 public:
  struct Segment {
    uint64_t offset;  // relative to the shard
    uint64_t count;
    bool critical;
    uint64_t stream;    // EF residual stream id
    uint64_t cols = 0;  // whole rows of one matrix tensor of this many columns; 0: not a matrix
    compression::MatrixShape shape() const { return {cols ? count / cols : 0, cols}; }
  };

  LeaderShard() = default;
  // A shard of `layout` as a server's hello describes it, on server `server` (an index into
  // RegionSync's links), cut into segments as `segments` says. InputError when it lies outside the
  // table or has more than 65536 segments.
  LeaderShard(const wire::ShardInfo& info, size_t server, const ParamTable& layout,
              Segments segments, const std::string& region);

  uint32_t id = 0;
  uint64_t offset = 0;  // in the flat buffer
  uint64_t count = 0;
  size_t server = 0;     // index into RegionSync's links
  uint64_t version = 0;  // last version pulled
  std::vector<Segment> segments;
  uint32_t fragment = 0;
  // This region's round minus the round its server counts for it: the same for every shard of a
  // fragment (LeaderShards::align), so that the region's rounds keep one offset on every server;
  // a shard deferred past rounds sits them out instead (wire::Push::skip). Non-zero after a
  // server released rounds without this region, or a leader restarted behind its servers.
  int64_t round_shift = 0;
  bool zero_start = false;  // hello: its values are still zero, so connect() pulls nothing
  // hello: the round its server expects next from this region for this shard (0: not said, the
  // hello's one for all its shards holds). Shards of one fragment may differ: a leader died
  // between its pushes of a round to two servers; of one server too: between two fragments'.
  uint64_t hello_next_round = 0;
  // hello: this region flushed the shard before connect() (a leader restarted after its run's
  // end): flush() does not push it again, and only pulls the global values.
  bool flushed_before = false;
  // Its server holds this region's flush of it (said by a hello, or a flush answered): flush()
  // does not push it again. A server restarted from its checkpoint holds none.
  bool flush_held = false;
  // The hash of the values its final pull brought (core/values_hash.hpp): the change from the
  // origin its server holds, as the server hashes it when it releases the flush.
  std::optional<uint64_t> final_hash;

  ElementRange range() const { return {offset, count}; }
  // Its slices of the region's view of the global model and of the origin (whole tables; an
  // empty origin is zero). Call once the tables have their final size.
  // Each incremental pull's change to base is added to `motion` (TensorMotion).
  void bind(FloatSpan base_table, ConstFloatSpan origin_table, TensorMotion& motion);
  // A fresh start: its server holds zeros, so base = origin, and nothing crosses the WAN.
  void start_from_origin();
  // The hello at connect(): its server expects round `server_next_round` next from this region.
  void connected(uint64_t server_next_round);
  // The round its server expects next from this region, as last learnt (a hello, a push, a
  // resync): a push of a later one sits out the rounds between.
  uint64_t expects_next() const { return expects_next_; }
  // Its server's frontier as its last pull said (wire::PullReply::frontier): the latest round a
  // counted region has pushed or sat out through.
  uint64_t frontier() const { return frontier_; }
  // The round its server counts for this region's round `our_round`.
  uint64_t server_round(uint64_t our_round) const {
    return static_cast<uint64_t>(static_cast<int64_t>(our_round) - round_shift);
  }

  // A push of local - base (`local`: the whole table), each segment encoded through `uplink`
  // with its stream; with `flush`, what it owes in fp32, segments that owe nothing left out.
  // Adds the payload bytes to `bytes` and the segments sent to `segments_sent`.
  wire::Push push_message(ConstFloatSpan local, Uplink& uplink, uint64_t round, uint64_t tokens,
                          bool flush, std::vector<wire::Frame>& frames, uint64_t& bytes,
                          uint32_t& segments_sent) const;

  // The replies among `replies` to its requests, taken out and applied: a push's answer moves its
  // phase, a pull's reply is decoded (all of it before base changes) into its slice of base.
  // Returns whether it took any. InputError when a reply is not what its request asked for or
  // does not decode (base unchanged, the request still counted as in flight).
  bool take(std::map<uint64_t, wire::Reply>& replies, const std::string& region, ShardTally& tally);

  ShardPhase phase() const { return phase_; }
  // The requests of this exchange, or of a deferred one, still unanswered.
  std::optional<uint64_t> push_id() const { return push_id_; }
  std::optional<uint64_t> pull_id() const { return pull_id_; }
  // The round its server counts for the push it was deferred in.
  uint64_t deferred_round() const { return deferred_round_; }
  // Its server's answer to its last push: how long the region that the round its pull waits for
  // still waits for has been silent there (wire::PushReply::awaited_silence_ms; 0 until then).
  std::chrono::milliseconds awaited_silence() const { return awaited_silence_; }
  // What the push of its exchange stands for (wire::Push::tokens), set when the exchange starts,
  // so that a push sent again carries the same.
  void set_tokens(uint64_t tokens) { tokens_ = tokens; }
  uint64_t tokens() const { return tokens_; }
  // After a resync: its server released this region's round `our_round` already (with our push;
  // the reply was lost), so the exchange does not push it again.
  bool released_round(uint64_t our_round) const { return server_round(our_round) < expects_next_; }
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
  bool needs_full_pull() const {
    return phase_ == ShardPhase::needs_resync || phase_ == ShardPhase::deferred_lost;
  }

  // Transitions (the diagram above).
  // Its push of its server's round `server_round` sent.
  void push(uint64_t request, uint64_t server_round);
  void push_answered();
  // Its pull sent: right behind its push (pushing), after the push's answer (pushed), or, when
  // deferred, once the push is answered.
  void pull(uint64_t request);
  void pulled(uint64_t version_pulled);
  // The exchange stops waiting for it; `server_round` is the round its server counts for it.
  void defer(uint64_t server_round);
  // Its server lost this region: its requests will not be answered, and a full pull is due
  // once the server is rejoined (a deferred shard stays deferred until then).
  void lost();
  // Its server, which lost this region, is still away when an exchange stops waiting: deferred
  // (the caller keeps its parameters local) until the full pull after the rejoin merges it;
  // `server_round` is the round its server counts for it.
  void defer_lost(uint64_t server_round);
  // A full pull sent (`our_round`: this region's next round of its fragment, for a resync).
  void full_pull(uint64_t request, FullPull kind, uint64_t our_round = 0);
  // A final pull given up on (its server lost this region meanwhile): its reply is not awaited.
  void give_up();
  // The full pull after a rejoin is applied to base (take() calls it).
  void resynced(uint64_t version_pulled);
  // Its flush push sent.
  void flush(uint64_t request);
  // A merged shard goes back to the caller; this region's next round of its fragment is
  // `our_next_round`, mapped onto its server's count by the region's shift `region_shift` (its
  // next push sits out the rounds it was deferred for), or by a smaller one when its server
  // expects a later round than that gives. A shard whose server lost this region since it was
  // merged is pulled in full first.
  void hand_back(uint64_t our_next_round, int64_t region_shift);

 private:
  void expect(bool ok, const char* transition) const {
    GT_ASSERT(ok, "shard {}: {}() in phase {}", id, transition, shard_phase_name(phase_));
  }
  // A pull reply, decoded into base; moves the phase by what the pull was.
  void apply_pull(const wire::Reply& reply, const std::string& region, ShardTally& tally);

  FloatSpan base_;
  ConstFloatSpan origin_;
  TensorMotion* motion_ = nullptr;
  ShardPhase phase_ = ShardPhase::idle;
  std::optional<uint64_t> push_id_, pull_id_;
  std::optional<FullPull> full_;  // what pull_id_ is, when a full pull
  uint64_t resync_round_ = 0;     // full_pull(): our next round when a resync was sent
  uint64_t deferred_round_ = 0;
  uint64_t tokens_ = 0;
  bool pulled_early_ = false;  // pushing: its pull answered before its push
  // The round its server expects next from this region, as last learnt (connected(), push(), a
  // resync).
  uint64_t expects_next_ = 0;
  uint64_t frontier_ = 0;
  std::chrono::milliseconds awaited_silence_{0};
};

}  // namespace geotrain::worker
