// LeaderShards: a region leader's shards and the requests they have at their servers (ps-lite's
// Customer: request tracking between the rounds' policy above and the transport below). Owns the
// connections to every server (ServerLinks), the shards (LeaderShard, each a task with its phase,
// its requests and its slice of base), the region's view of the global model (`base`, theta_base
// in the design: one copy, each shard owning its slice), the uplink's error feedback (Uplink) and
// each fragment's round count. It registers with the servers (connect()), sends a shard's
// requests, hands each server's replies to their shards (await(): the one place a reply finds
// its shard), and answers a server that lost this region (lose(), rejoin(), resync()).
// RegionSync (worker/leader/region_sync.hpp) runs the rounds, the deferred shards and the flush
// over it.
//
// Blocking: connect(), await(), take_deferred(), resync() and keep_alive() wait on the network,
// up to config.timeout per reply. Not thread-safe: RegionSync's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <stop_token>
#include <string>
#include <vector>

#include "core/fragments.hpp"
#include "core/param_table.hpp"
#include "core/span.hpp"
#include "wire/context.hpp"
#include "worker/leader/reply_wait.hpp"
#include "worker/leader/server_hellos.hpp"
#include "worker/leader/server_links.hpp"
#include "worker/leader/shard.hpp"
#include "worker/leader/sync_config.hpp"
#include "worker/leader/tensor_motion.hpp"
#include "worker/leader/uplink.hpp"

namespace geotrain::worker {

// What connect()'s `resume_at` is: the earliest round the region may go on from (the servers'
// count when they are further along: a snapshot's round, which the region left behind while it
// was away), or the round it goes on from whatever the servers count (a leader started again
// beside members that kept the region's state: their round, which their schedules follow).
enum class ResumeRound : uint8_t { at_least, exactly };

class LeaderShards {
 public:
  using Clock = std::chrono::steady_clock;
  using Shards = std::vector<LeaderShard*>;

  LeaderShards(const ParamTable& layout, SyncConfig config, wire::Context& context);

  // RegionSync's calls of the same names (worker/leader/region_sync.hpp says what they do).
  void set_origin(ConstFloatSpan origin);
  void stop_waits_on(std::stop_token stop) { links_.stop_waits_on(std::move(stop)); }
  uint64_t connect(uint64_t resume_at, ResumeRound how);
  void keep_alive();
  void goodbye(std::chrono::milliseconds wait) { links_.goodbye(wait); }
  std::map<std::string, std::vector<float>> residuals() const { return uplink_.residuals(); }
  void restore_residuals(const std::map<std::string, std::vector<float>>& residuals);
  std::vector<ElementRange> fragment_ranges(uint32_t fragment) const;
  size_t deferred() const;
  bool flushed_before_connect() const;
  uint64_t rejoins() const { return links_.rejoins(); }
  uint64_t startup_bytes_pulled() const { return startup_bytes_pulled_; }

  const SyncConfig& config() const { return config_; }
  ConstFloatSpan base() const { return base_; }
  const TensorMotion& motion() const { return motion_; }
  size_t table_size() const { return base_.size(); }
  bool connected() const { return !shards_.empty(); }
  size_t servers() const { return links_.size(); }
  ServerLink& link(size_t s) { return links_[s]; }
  ReplyWait waiting(size_t s, bool probe) { return links_.waiting(s, probe); }

  // The round each fragment pushes next, in this region's count; a shard's.
  uint64_t& round(uint32_t fragment) { return rounds_.at(fragment); }
  uint64_t round(uint32_t fragment) const { return rounds_.at(fragment); }
  uint64_t our_round(const LeaderShard& sh) const { return rounds_[sh.fragment]; }
  // Every fragment's next round one later (an exchange of the whole table).
  void next_rounds() {
    for (auto& r : rounds_) ++r;
  }

  // One shift per fragment (LeaderShard::round_shift): the smallest of its idle shards', given to
  // all of them, so that the region's rounds of the fragment map onto every server's count alike
  // (rounds are released where every region has pushed them: a region a round further along on
  // one server than on another makes every round wait for two exchanges); lowered further when a
  // server's frontier (its last pull) is more than the staleness bound ahead of the fragment's
  // next round there. A shard whose shift falls sits out the rounds between at its next push.
  // The shift only falls: a region never re-derives it from one server's count (regions that did
  // so at different moments paired their rounds differently, and every exchange then waited out
  // shard_wait for a partner a second away).
  void align(uint32_t fragment);
  // A merged shard back to the caller (LeaderShard::hand_back) at the fragment's shift; aligned.
  void hand_back(LeaderShard& sh, uint64_t our_next_round);

  // The shards `keep` is true for, in their order; those of them on server s.
  template <typename Keep>
  Shards where(Keep keep) {
    Shards out;
    for (auto& sh : shards_)
      if (keep(sh)) out.push_back(&sh);
    return out;
  }
  static Shards on(size_t s, const Shards& of);

  // A shard's requests, sent to its server; each moves the shard's phase. A push of local - base
  // (with `flush`, what it owes in fp32: LeaderShard::push_message), adding its payload bytes and
  // segments; a pull of the change since its version, at least the staleness bound behind
  // `server_round`; a full pull.
  void send_push(LeaderShard& sh, ConstFloatSpan local, bool flush, uint64_t& bytes,
                 uint32_t* segments = nullptr);
  void send_pull(LeaderShard& sh, uint64_t server_round);
  void send_full_pull(LeaderShard& sh, FullPull kind);
  // A deferred shard whose push was answered, or one pulled in full by this exchange (its server
  // had lost this region; merged, handed back for the next exchange), not pushed in this
  // exchange: its server is told the region sits out the round it counts for this exchange
  // (wire::Push::absent), so that the other regions' round there is released without waiting
  // for the shard's next push (after a partition's heal, a round per fragment). Not
  // awaited: its answer is dropped, and the shard's next push skips to its round whatever came
  // of it. Returns whether it was sent.
  bool send_absent(LeaderShard& sh);
  // Waits on server s for the requests `shards` have in flight (ServerLink::collect with `how`)
  // and hands each reply to its shard (LeaderShard::take). Throws what collect() throws.
  void await(size_t s, const Shards& shards, std::chrono::milliseconds timeout, const char* what,
             ReplyWait how, ShardTally& tally) {
    await_requests(s, shards, timeout, what, std::move(how), tally, false);
  }
  // The same for their pushes only (the pulls behind them stay in flight).
  void await_pushes(size_t s, const Shards& shards, std::chrono::milliseconds timeout,
                    const char* what, ReplyWait how, ShardTally& tally) {
    await_requests(s, shards, timeout, what, std::move(how), tally, true);
  }
  // Deferred shards among `shards` (all on s): takes the replies that came (waiting up to `wait`
  // for them all, ServerLink::collect_in_flight), sending a pull behind each push answered.
  // Throws ServerLost when the server lost this region.
  void take_deferred(size_t s, const Shards& shards, std::chrono::milliseconds wait);
  // Whether server s is silent: it has not answered a push of ours that an earlier exchange
  // stopped waiting for (looked at without waiting and without taking anything:
  // ServerLink::look_in_flight). A live server answers a push as it takes it, whatever round it
  // waits for; one that has not for a shard wait is stopped or cut off from this region
  // (RegionSync::push_and_pull). Throws ServerLost.
  bool silent(size_t s);

  // The server answered `unregistered`: its requests are gone, its shards need full pulls.
  void lose(size_t s, const std::string& why);
  // Hello to a server that lost this region; notes what it holds of this region's flush. Given
  // `within`, false when it has not answered by then (it is still away: the link stays lost).
  bool rejoin(size_t s, std::optional<std::chrono::milliseconds> within = {});
  // Those of `shards` on s that need a full pull and are not deferred yet, deferred until their
  // server is back (LeaderShard::defer_lost): it is away, and the exchange does not wait for it.
  void defer_away(size_t s, const Shards& shards);
  // Full pulls of those of `shards` on s that need one; returns those whose round their server
  // released already (not pushed again). Throws ServerLost when it lost this region again.
  Shards resync(size_t s, const Shards& shards, ShardTally& tally);
  // Rejoins the servers that lost this region and resyncs `shards` there (before an exchange or
  // the flush); returns those whose round was released already. A ServerLost goes to `on_lost`.
  // Given `within` (an exchange that defers), a server that has not answered by then is left
  // lost, its shards among `shards` deferred (defer_away()).
  Shards resync_lost(const Shards& shards, ShardTally& tally,
                     const std::function<void(size_t, const ServerLost&)>& on_lost,
                     std::optional<std::chrono::milliseconds> within = {});
  // The uplink's residuals of every shard dropped (the flush leaves them out of the final model).
  void drop_residuals() { uplink_.reset(shards_); }

 private:
  // How long keep_alive() looks for a lost server's answer to its hello before it lets an
  // exchange have the links again (it looks again at its next call).
  static constexpr std::chrono::milliseconds kKeepAliveLook{100};

  void await_requests(size_t s, const Shards& shards, std::chrono::milliseconds timeout,
                      const char* what, ReplyWait how, ShardTally& tally, bool pushes_only);

  wire::Hello hello() const;
  // connect(): every shard given the smallest shift of all (the fragments whose servers expect an
  // earlier round sit out the rounds up to the others'). A leader stopped between its fragments'
  // pushes leaves the fragments it pushed a round further on at the servers than the others; its
  // successor, mapping each fragment as its servers expect, was then early on those (it waits for
  // the other regions there) and late on the rest (they wait for it there, and defer): waiting
  // on some fragments made it later on the others, so the fleet never came back in step (on the
  // LM demo under chaos the other regions deferred half their shards at every round from then on;
  // docs/benchmarks.md). Early on every fragment, its first exchanges wait for the others once
  // (RegionSync::kFirstExchangeWaits) and the region is in step again.
  void same_shift_everywhere();

  const ParamTable& layout_;
  SyncConfig config_;
  ServerLinks links_;  // one per server, in config_.servers' order
  std::vector<LeaderShard> shards_;
  std::vector<float> base_;
  std::vector<float> origin_;  // empty: zero
  TensorMotion motion_;        // what the incremental pulls moved, per tensor
  Uplink uplink_;
  std::vector<uint64_t> rounds_;  // per fragment: the round it pushes next
  std::vector<int64_t> shifts_;   // per fragment: its shards' round_shift (align())
  uint64_t startup_bytes_pulled_ = 0;
};

}  // namespace geotrain::worker
