// RegionSync: a region leader's side of the inter-region exchange (DESIGN.md, "One round";
// docs/architecture.md walks one round through it).
//
// Owns one ServerLink per server (ServerLinks: every region's server, each owning some shards),
// the shards (LeaderShard, worker/leader/shard.hpp: each a task with its phase, its requests, its
// slice of base and the meaning of its replies), the region's view of the global model (`base`,
// theta_base in the design; one copy, each shard owning its slice) and the uplink's error
// feedback (Uplink). RegionSync is the loop that sends the shards' requests, hands each server's
// replies to its shards (await()) and asks them where they are.
//
// A round: every shard's push (local - base, encoded per segment with its class's codec and EF)
// goes out before any reply is awaited, and each shard's pull right behind it (one WAN round trip
// per round). A pull waits at its server for round t - staleness_bound to be released. With
// streaming fragments (config.fragments = P > 1) exchange() takes one fragment's shards, and each
// fragment counts its own rounds: a (fragment, round) pair is the unit of synchronisation.
//
// Recovery (leader_shards.cpp and region_sync.cpp's redo; docs/run.md, "Restarts"): a server that
// lost this region answers `unregistered` (a heartbeat finds out while a reply is awaited); the
// leader rejoins it, pulls its shards in full and does the round again on them; rounds the server
// lost are sat out (wire::Push::skip), so that the region's rounds keep one offset on every server
// (LeaderShards::align); at most kMaxRejoinAttempts per exchange.
// Deferred shards (config.shard_wait > 0, overlapped exchanges; docs/training.md, "Deferred
// shards"): what has not come within shard_wait stays in flight, its part of base unchanged and
// its parameters local to the caller (RoundReport::deferred) until take_ready(), settle() or the
// flush (region_sync_flush.cpp) merges it. A server that lost this region and does not answer
// its hello within the shard wait (killed, restarting) is not waited for either: its shards are
// deferred (LeaderShard::defer_lost) until a later exchange finds it back and pulls them in full.
//
// Blocking: connect() and exchange() block on the network, up to `timeout` per reply (a missing
// reply is a SystemError naming the server). Not thread-safe: one thread (see StreamingSync
// for running it in the background). Buffers: base() is owned here; callers pass spans in.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "core/fragments.hpp"
#include "core/param_table.hpp"
#include "core/span.hpp"
#include "wire/client.hpp"
#include "wire/context.hpp"
#include "worker/leader/leader_shards.hpp"
#include "worker/leader/shard_wait.hpp"
#include "worker/leader/sync_config.hpp"

namespace geotrain::worker {

class RegionSync {
 public:
  using Clock = std::chrono::steady_clock;

  RegionSync(const ParamTable& layout, SyncConfig config, wire::Context& context)
      : shards_(layout, std::move(config), context),
        shard_wait_(shards_.config().shard_wait, shards_.config().shard_wait_auto,
                    shards_.config().timeout / 2) {}
  RegionSync(const RegionSync&) = delete;
  RegionSync& operator=(const RegionSync&) = delete;

  // The servers hold the sum of all applied deltas, starting from zero. Every region starts
  // its model from the same deterministic initialisation (the config's seed), so the global
  // parameters are origin + server values: a full pull sets base = origin + values. Call before
  // connect(); without it the origin is zero. InputError on a size mismatch.
  void set_origin(ConstFloatSpan origin) { shards_.set_origin(origin); }

  // Every wait for a server from now on ends with Stopped once `stop` is requested and the wait
  // has lasted kStopGrace (worker/leader/reply_wait.hpp): a worker told to stop does not sit out
  // config.timeout on a server that died. Without it, waits go on until their timeout.
  void stop_waits_on(std::stop_token stop) { shards_.stop_waits_on(std::move(stop)); }

  // Registers with every server and pulls full values into base(), except for shards whose
  // server says they are still zero (a fresh start): those take base = origin and cross no WAN.
  // Returns the round the region pushes next (1 for a fresh start, later after a rejoin): the
  // earliest any server expects, or `resume_at` when that is later (a region resumed from its
  // snapshot of round resume_at - 1 goes on from there; a server that counts fewer rounds for it,
  // having restored an older checkpoint, is told the region sat out the rounds between, and a
  // delta against its values carries what it lost).
  // The servers' streaming layout (fragments, the critical fragment), which their hellos name,
  // becomes this region's: config().fragments and critical_fragment follow it (logged where the
  // config said otherwise); servers that disagree with each other are an InputError.
  // With ResumeRound::exactly, the region goes on from `resume_at` whatever the servers count (a
  // leader started again beside members that hold the region's state for that round).
  uint64_t connect(uint64_t resume_at = 0, ResumeRound how = ResumeRound::at_least) {
    const uint64_t next = shards_.connect(resume_at, how);
    exchanges_.assign(shards_.config().fragment_count(), 0);
    return next;
  }

  // One round: pushes local - base, pulls the new values into base. Returns what it measured.
  // With a fragment, only that fragment's shards (only their part of `local` is read, and only
  // their part of base changes); without, every shard, each in its fragment's round. With
  // `defer` and config.shard_wait > 0, shards may be deferred (above): `local` is not read for
  // shards deferred before the call. Without `defer`, none of the fragment's shards may be
  // deferred (settle() first).
  // `tokens`: what the pushes stand for (SyncConfig::tokens_per_round; 0: that value).
  RoundReport exchange(ConstFloatSpan local, std::optional<uint32_t> fragment = std::nullopt,
                       bool defer = false, uint64_t tokens = 0);

  // Deferred shards of `fragment` whose replies have come, merged into base now (without
  // waiting); returns their ranges. Call between exchanges, before the caller starts the
  // fragment again: the next exchange pushes them, so that no round of theirs is skipped at
  // their server beyond those they were deferred for (a region that skipped more would fall
  // behind the others there, and every later round would wait for it).
  std::vector<ElementRange> take_ready(uint32_t fragment);
  // Waits (up to config.timeout per server) for every deferred shard and merges it into base;
  // returns their ranges. Their progress since is pushed by the next exchange of their fragment.
  // A region whose deferred push is one ahead of another region's at that server waits here
  // until that region pushes again, flushes or leaves: at the end of a run, flush() instead.
  std::vector<ElementRange> settle();
  // Shards deferred now.
  size_t deferred_shards() const { return shards_.deferred(); }
  // A shard's server said at connect() that this region had flushed it already: the region's run
  // ended before this leader started (it was restarted during or after its flush, which starts
  // only after its last round). Such a region trains no more rounds: those servers refuse its
  // pushes; flush() flushes the shards still owed (if the leader died between its flush's
  // messages) and pulls the global model.
  bool flushed_before_connect() const { return shards_.flushed_before_connect(); }

  // Sends a heartbeat to servers not contacted within config.heartbeat. Cheap; call between steps.
  void keep_alive() { shards_.keep_alive(); }

  // The region leaves: every server stops counting it at once (goodbye), so that a round another
  // region still has to do (one ahead after a partition, say) does not wait dead_after for it.
  // Best effort: waits at most `wait` for each server's answer, logs what did not answer, never
  // throws. Call once training is over, after the last exchange; no exchange after it.
  void goodbye(std::chrono::milliseconds wait) { shards_.goodbye(wait); }

  // The end of a run (docs/training.md, "The end of a run"; region_sync_flush.cpp). Pushes to
  // every shard, marked as a flush, the progress not pushed yet (local - base) in fp32, whatever
  // the configured codecs; a segment where it is zero sends nothing, and the uplink residuals are
  // dropped, not sent. Then pulls every shard in full, each held by its server until every live
  // region has flushed it, into base(): base() is then the global model (the mean of what the
  // regions hold, plus their progress), the same in every region that flushed, bit for bit. Call
  // once, after the last exchange (nothing in the background), before goodbye(); no exchange
  // after it. Deferred shards are flushed last, each once its replies have come and
  // `merge_settled` has taken its range into `local` (the caller's merge rule, as after
  // take_ready()); without deferred shards `merge_settled` is not called (and may be empty). Blocks
  // up to config.timeout per reply. A server that loses this region during the flush (restarted
  // from its checkpoint, or declared the region dead) is rejoined, its shards pulled in full, and
  // those it holds no flush of flushed again, up to kMaxRejoinAttempts times. A server that does
  // not answer, keeps losing this region, refuses, or is of a build without the flush is an
  // exception naming it (SystemError, InputError); base() may then hold some shards' final
  // values and not others', and the caller reports the global model missing.
  using MergeSettled = std::function<void(const ElementRange&)>;
  FlushReport flush(FloatSpan local, const MergeSettled& merge_settled = {});

  ConstFloatSpan base() const { return shards_.base(); }
  // How far each tensor moved in the pulls so far (TensorMotion).
  const TensorMotion& motion() const { return shards_.motion(); }
  uint64_t next_round(uint32_t fragment = 0) const { return shards_.round(fragment); }
  // The element ranges of fragment p's shards (valid after connect()).
  std::vector<ElementRange> fragment_ranges(uint32_t fragment) const {
    return shards_.fragment_ranges(fragment);
  }
  const SyncConfig& config() const { return shards_.config(); }
  // How often a server was rejoined after it lost this region.
  uint64_t rejoins() const { return shards_.rejoins(); }
  // Payload bytes connect() pulled: none on a fresh start, whose servers hold zeros (the hello
  // says so per shard), and the full values of every shard that has changed otherwise.
  uint64_t startup_bytes_pulled() const { return shards_.startup_bytes_pulled(); }

  // The uplink error-feedback residuals, "critical.<stream>" / "noncritical.<stream>", for a
  // worker checkpoint (worker/run/worker_checkpoint.hpp).
  std::map<std::string, std::vector<float>> residuals() const { return shards_.residuals(); }
  // Restores them (after connect()). InputError naming the stream when it is not one of this
  // table's segments or has another length; nothing changes then.
  void restore_residuals(const std::map<std::string, std::vector<float>>& residuals) {
    shards_.restore_residuals(residuals);
  }

 private:
  using Shards = LeaderShards::Shards;
  // Pipelining a shard's pull behind its push keeps two requests waiting at its server, which
  // holds wire::max_waiting_per_peer(its shards) of ours: every shard's pull goes right behind
  // its push (a leader never has more than all of a server's shards in flight).
  static constexpr uint32_t kMaxRejoinAttempts = 4;
  // How long an exchange that defers looks for the answer of a server that lost this region
  // before it pushes to the others (its hellos go out at every exchange and keep_alive).
  static constexpr std::chrono::milliseconds kAwayLook{20};
  // A fragment's first exchange since connect() waits this many shard waits before it defers. A
  // leader started again between its fragments' pushes pushes those its predecessor had pushed
  // a round ahead of the other regions (their round shift), so their pulls wait a round for the
  // others' pushes; only a wait that long puts the region back in step. Deferring after one shard
  // wait, every later exchange of those fragments deferred again, the region a round out of step
  // (for a minute and a half once on the LM demo under chaos).
  static constexpr int kFirstExchangeWaits = 4;
  // A region that a server has not heard from for this many heartbeats (config.heartbeat: every
  // live leader contacts every server at least that often) is silent there, not late: cut off
  // from it by a partition, or its leader dead. A round held for it is not released within a
  // shard wait either; every fragment's exchange waiting one out there cost the others about a
  // shard wait per fragment per partition (the LM demo under chaos, docs/benchmarks.md).
  static constexpr int kSilentRegionHeartbeats = 2;
  // The flush's final pulls wait at their server: at most this many per server at once.
  static constexpr size_t kMaxFinalPulls = wire::kMaxWaitingPerPeer;
  static constexpr std::chrono::milliseconds kFlushPoll{20};

  // How long the waits of one exchange last: config.timeout, or, when it may defer, until
  // config.shard_wait after its pushes went out.
  struct RoundClock {
    Clock::time_point defer_at;
    bool defer = false;
    std::chrono::milliseconds timeout;
    std::chrono::milliseconds left() const;
  };

  // The round for `shards`: pushes, then pulls; a server that lost this region is rejoined and
  // the round redone there (redo) in its turn. With `defer`, what has not come within `wait` of
  // the pushes is deferred; with `skip_silent` too, at once on servers that are silent
  // (LeaderShards::silent, looked at before the pushes go out: a look takes the replies of
  // requests left in flight only, and drops any other).
  void push_and_pull(ConstFloatSpan local, const Shards& shards, RoundReport& report,
                     ShardTally& tally, bool defer, std::chrono::milliseconds wait,
                     bool skip_silent);
  // Servers (of those `shards` are on) that are silent, when `look`; a server found to have lost
  // this region is lost (LeaderShards::lose), not silent.
  std::vector<bool> silent_servers(const Shards& shards, bool look);
  // The replies of server s to this exchange's requests; what has not come when the wait ends
  // is deferred (its requests left in flight on the link). With `look_only`, what has come
  // already, without waiting (a silent server). Deferring, the pushes' answers are awaited
  // first: where one says the round waits for a region that server has not heard from for
  // kSilentRegionHeartbeats heartbeats, the pulls are only looked at.
  void await_round(size_t s, const RoundClock& clock, const char* what, ShardTally& tally,
                   bool look_only = false);
  // Rejoins server s, pulls `shards` (on s) in full and pushes and pulls them again (the pulls
  // deferred as the round's are, by `clock`); up to kMaxRejoinAttempts times, then SystemError.
  void redo(size_t s, ConstFloatSpan local, const Shards& shards, const RoundClock& clock,
            RoundReport& report, ShardTally& tally);
  // settle(): the deferred shards of server s, merged or pulled in full; appends their ranges.
  void settle_server(size_t s, std::vector<ElementRange>& out);

  // The flush (region_sync_flush.cpp): one attempt at it; FlushServerLost when a server lost this
  // region meanwhile (flush() rejoins it and calls this again).
  struct FlushServerLost;
  void flush_and_pull(FloatSpan local, const MergeSettled& merge_settled, FlushReport& report);
  // The deferred shards, each flushed once its replies have come and merge_settled has merged it.
  void flush_deferred(FloatSpan local, const MergeSettled& merge_settled, FlushReport& report);
  // The flush pushes of `shards`, sent, then their answers awaited.
  void flush_shards(const Shards& shards, ConstFloatSpan local, FlushReport& report);
  // Every shard's final pull, at most kMaxFinalPulls per server at once.
  void pull_final(FlushReport& report);

  LeaderShards shards_;
  ShardWait shard_wait_;             // how long an exchange that may defer waits for a server
  std::vector<uint64_t> exchanges_;  // per fragment: exchanges since connect()
};

}  // namespace geotrain::worker
