// RegionSync: a region leader's side of the inter-region exchange (DESIGN.md, "One round").
//
// Owns one wire::Client per server (every region's server, each owning some shards), the
// region's view of the global parameters (`base`, theta_base in the design), and the
// error-feedback residuals of the uplink: one ErrorFeedback per tensor class (critical /
// non-critical, each with its own codec), one residual stream per segment.
//
// A round: delta = local - base per shard, cut into segments of one tensor class each and
// encoded with that class's codec plus EF; every shard's push goes out before any reply is
// awaited, so the servers work in parallel, and each shard's pull right behind its push (one
// WAN round trip per round, not two): the change since the version this region last received,
// compressed with server-side EF, decoded and added to base. The pull waits for round t -
// staleness_bound to be released: with bound 0 the exchange is synchronous; with bound s, this
// region may run s rounds ahead of the slowest (the servers' gate enforces the same bound on
// pushes).
//
// Streaming fragments (config.fragments = P > 1): the servers cut every fragment into their own
// shards (server/shard_map.hpp) and name each shard's fragment in the hello reply; with
// config.critical_fragment the critical tensors form fragment P. exchange() with a fragment
// pushes and pulls only that fragment's shards, and every fragment counts its own rounds: the
// server gates and releases each shard separately, so a (fragment, round) pair is the unit of
// synchronisation, and one fragment is the whole table when P = 1.
//
// A server that loses this region (it restarted from its checkpoint, a new connection replaced
// ours because netsim restarted, or it declared the region dead) answers `unregistered`; while
// a reply is awaited, a heartbeat goes out after every `heartbeat` of silence to find out (a
// request in flight when the server died gets no answer at all). The leader then rejoins that
// server (hello, re-sent until answered), pulls its shards in full and does the round again on
// them, with the delta taken against the values it pulled: rounds the server lost since its
// checkpoint are re-pushed inside that delta (docs/run.md, "Restarts"). A server that released
// the round already gets no second push. Its round counter may now differ from this region's:
// each shard keeps the difference (round_shift). At most kMaxRejoinAttempts per exchange.
//
// Deferred shards (config.shard_wait > 0, for overlapped exchanges only): an exchange waits at
// most shard_wait for a server. Shards whose replies have not come by then are deferred: their
// push and pull stay in flight, their part of base() does not change, and the caller keeps their
// parameters local (RoundReport::deferred). Later exchanges of their fragment neither push nor
// wait for them; take_ready(), between exchanges, merges those whose replies have come (base
// changes), and the next exchange pushes them again, their server's rounds mapped through
// round_shift. A stopped or partitioned server thus delays a third of the model, not every
// region's round (docs/training.md, "Deferred shards"). A deferred shard whose server lost this
// region (it restarted, or declared the region dead) is pulled in full instead: the region's
// progress in that push is dropped. settle() waits for every deferred shard (the end of a run
// without the flush); flush() sends them after the other shards' flushes (the end of a run).
//
// Parts: each shard's phase in the exchange is one value (LeaderShard, worker/leader_shard.hpp:
// idle, pushing, pushed, pulling, deferred, deferred_lost, merged, needs_resync) moved by its
// transitions; each server's connection, its rejoin, probes and the replies parked for deferred
// shards are a ServerLink (worker/server_link.hpp). RegionSync drives the rounds over them:
// region_sync.cpp the exchange, region_sync_recovery.cpp the deferred shards and rejoins,
// region_sync_flush.cpp the end of a run.
//
// Blocking: connect() and exchange() block on the network, up to `timeout` per reply (a missing
// reply is a SystemError naming the server). Not thread-safe: one thread (see StreamingSync
// for running it in the background). Buffers: base() is owned here; callers pass spans in.
#pragma once

#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "compression/codec_schedule.hpp"
#include "compression/error_feedback.hpp"
#include "core/fragments.hpp"
#include "core/param_table.hpp"
#include "core/span.hpp"
#include "wire/client.hpp"
#include "worker/leader_shard.hpp"
#include "worker/server_link.hpp"

namespace geotrain::worker {

struct SyncConfig {
  std::string region;            // this region's name, as in the config's `regions`
  using Server = ServerAddress;  // worker/server_link.hpp
  std::vector<Server> servers;   // every region's server (the leader talks to all of them)
  // Each class's codec by round (compression/codec_schedule.hpp): a push of round t (this
  // region's count, rounds_) encodes with codec_at(t); at a switch the residuals are kept.
  compression::CodecSchedule critical_codec = "onebit";
  compression::CodecSchedule noncritical_codec = "int8";
  float error_feedback_decay = 1.0f;  // worker.error_feedback.decay, for both classes
  // worker.chunk_align: tensor. Every tensor is a segment of its own (its own payload and EF
  // stream), so that a codec's chunks restart at each tensor boundary: a LayerNorm gain no longer
  // shares a chunk scale with the weight matrix beside it. The servers decode any segmentation
  // (each payload names its codec and count); the cost is a payload header (40 bytes) and at
  // most one partial chunk per tensor. Off: one segment per run of tensors of one class.
  bool tensor_segments = false;
  uint32_t staleness_bound = 0;
  // Streaming fragments (worker.fragments); connect() replaces it with the servers' count.
  uint32_t fragments = 1;
  // worker.stream_critical false with fragments > 1: the servers put the critical tensors in a
  // fragment of their own, index `fragments` (WorkerConfig::critical_fragment()).
  bool critical_fragment = false;
  // Fragments in the servers' shard map: P, or P + 1 with the critical fragment.
  uint32_t fragment_count() const { return fragments + (critical_fragment ? 1 : 0); }
  std::chrono::milliseconds timeout{60'000};  // per reply
  // worker.shard_wait_ms: the longest an exchange that may defer waits for a server (see above);
  // 0: never defer.
  std::chrono::milliseconds shard_wait{0};
  std::chrono::milliseconds heartbeat{1'000};
  // worker.streams_per_server: connections to each server, messages striped over them
  // (wire::ChannelOptions::lanes); 0 (auto): connect() measures the round trip to each server
  // first and asks wire::streams_for_link with link_mbps and this host's TCP window.
  // worker.socket_buffer_kib in bytes (0: the OS default).
  uint32_t streams_per_server = 1;
  double link_mbps = 1000;
  int socket_buffer_bytes = 0;
  // Tokens (samples) the region trains on between two pushes of a shard, sent with every push
  // so that a server with server.consistency.weighting: tokens weighs this region's delta by
  // them (docs/protocol.md); 0: unknown, weighted like every other delta.
  uint64_t tokens_per_round = 0;
};

struct RoundReport {
  uint64_t round = 0;
  uint32_t fragment = 0;        // the fragment exchanged (0 when the whole table was)
  uint64_t bytes_pushed = 0;    // payload bytes sent (frames after the header)
  uint64_t bytes_pulled = 0;    // payload bytes received
  double push_seconds = 0;      // first push sent -> last push reply
  double pull_seconds = 0;      // first pull sent -> last pull reply
  uint32_t max_staleness = 0;   // the largest staleness a server reported for our pushes
  uint64_t gate_wait_us = 0;    // the longest time a push waited at a server's gate
  uint64_t released_round = 0;  // the oldest round released among the pulled shards
  // StreamingSync: how long the caller's thread waited for this exchange to come back (a
  // background one at its merge, a blocking one throughout); 0 from RegionSync itself.
  double merge_wait_seconds = 0;
  // Deferred shards: the ranges of this fragment whose exchange is still in flight after this
  // exchange (base unchanged there: keep them local, merge them later), and how many shards
  // deferred earlier were merged (StreamingSync counts those take_ready() merged).
  std::vector<ElementRange> deferred;
  uint32_t late_shards = 0;
};

// What the flush at the end of a run moved (RegionSync::flush).
struct FlushReport {
  uint64_t bytes_pushed = 0;   // the flush pushes' payload: fp32, only the segments that owed
  uint64_t bytes_pulled = 0;   // the final pulls' payload: every shard's full fp32 values
  double push_seconds = 0;     // first flush sent -> last flush answered
  double pull_seconds = 0;     // first final pull sent -> last answered (the wait for the others)
  uint32_t segments_owed = 0;  // segments that owed something (pushed)
  // Servers that lost this region during the flush (a restart from a checkpoint): rejoined, and
  // what they no longer held flushed again; the bytes and seconds above include those attempts.
  uint32_t rejoins = 0;
};

class RegionSync {
 public:
  using Clock = std::chrono::steady_clock;

  RegionSync(const ParamTable& layout, SyncConfig config, zmq::context_t& context);
  ~RegionSync();
  RegionSync(const RegionSync&) = delete;
  RegionSync& operator=(const RegionSync&) = delete;

  // The servers hold the sum of all applied deltas, starting from zero. Every region starts
  // its model from the same deterministic initialisation (the config's seed), so the global
  // parameters are origin + server values: a full pull sets base = origin + values. Call before
  // connect(); without it the origin is zero. InputError on a size mismatch.
  void set_origin(ConstFloatSpan origin);

  // Every wait for a server from now on ends with Stopped once `stop` is requested and the wait
  // has lasted kStopGrace (worker/reply_wait.hpp): a worker told to stop does not sit out
  // config.timeout on a server that died. Without it, waits go on until their timeout.
  void stop_waits_on(std::stop_token stop) { stop_ = std::move(stop); }

  // Registers with every server and pulls full values into base(), except for shards whose
  // server says they are still zero (a fresh start): those take base = origin and cross no WAN.
  // Returns the round the region pushes next (1 for a fresh start, later after a rejoin): the
  // earliest any server expects, or `resume_at` when that is later (a region resumed from its
  // snapshot of round resume_at - 1 goes on from there; a server that counts fewer rounds for it,
  // having merged some of its shards late or restored an older checkpoint, is mapped through
  // round_shift, and a delta against its values carries what it lost).
  // The servers' streaming layout (fragments, the critical fragment), which their hellos name,
  // becomes this region's: config().fragments and critical_fragment follow it (logged where the
  // config said otherwise); servers that disagree with each other are an InputError.
  uint64_t connect(uint64_t resume_at = 0);

  // One round: pushes local - base, pulls the new values into base. Returns what it measured.
  // With a fragment, only that fragment's shards (only their part of `local` is read, and only
  // their part of base changes); without, every shard, each in its fragment's round. With
  // `defer` and config.shard_wait > 0, shards may be deferred (above): `local` is not read for
  // shards deferred before the call. Without `defer`, none of the fragment's shards may be
  // deferred (settle() first).
  RoundReport exchange(ConstFloatSpan local, std::optional<uint32_t> fragment = std::nullopt,
                       bool defer = false);

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
  size_t deferred_shards() const;
  // A shard's server said at connect() that this region had flushed it already: the region's run
  // ended before this leader started (it was restarted during or after its flush, which starts
  // only after its last round). Such a region trains no more rounds: those servers refuse its
  // pushes; flush() flushes the shards still owed (if the leader died between its flush's
  // messages) and pulls the global model.
  bool flushed_before_connect() const;

  // Sends a heartbeat to servers not contacted within config.heartbeat. Cheap; call between steps.
  void keep_alive();

  // The region leaves: every server stops counting it at once (goodbye), so that a round another
  // region still has to do (one ahead after a partition, say) does not wait dead_after for it.
  // Best effort: waits at most `wait` for each server's answer, logs what did not answer, never
  // throws. Call once training is over, after the last exchange; no exchange after it.
  void goodbye(std::chrono::milliseconds wait);

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

  ConstFloatSpan base() const { return base_; }
  uint64_t next_round(uint32_t fragment = 0) const { return rounds_.at(fragment); }
  // The element ranges of fragment p's shards (valid after connect()).
  std::vector<ElementRange> fragment_ranges(uint32_t fragment) const;
  const SyncConfig& config() const { return config_; }
  // How often a server was rejoined after it lost this region.
  uint64_t rejoins() const { return rejoins_; }
  // Payload bytes connect() pulled: none on a fresh start, whose servers hold zeros (the hello
  // says so per shard), and the full values of every shard that has changed otherwise.
  uint64_t startup_bytes_pulled() const { return startup_bytes_pulled_; }

  // The uplink error-feedback residuals, "critical.<stream>" / "noncritical.<stream>", for a
  // worker checkpoint (worker/worker_checkpoint.hpp).
  std::map<std::string, std::vector<float>> residuals() const;
  // Restores them (after connect()). InputError naming the stream when it is not one of this
  // table's segments or has another length; nothing changes then.
  void restore_residuals(const std::map<std::string, std::vector<float>>& residuals);

 private:
  // Pipelining a shard's pull behind its push keeps two requests waiting at its server, which
  // holds at most wire::kMaxWaitingPerPeer of ours.
  static constexpr size_t kMaxPipelinedShards = 2;
  static_assert(2 * kMaxPipelinedShards <= wire::kMaxWaitingPerPeer);
  static constexpr uint32_t kMaxRejoinAttempts = 4;
  // The flush's final pulls wait at their server: at most this many per server at once.
  static constexpr size_t kMaxFinalPulls = wire::kMaxWaitingPerPeer;

  // How long the waits of one exchange last: config.timeout, or, when it may defer, until
  // config.shard_wait after its pushes went out.
  struct RoundClock {
    Clock::time_point defer_at;
    bool defer = false;
    std::chrono::milliseconds timeout;
    std::chrono::milliseconds left() const;
  };

  // The streaming layout a server's hello names (wire::HelloReply::fragments).
  struct FragmentLayout {
    uint32_t fragments;
    bool critical;       // plus the critical tensors' own fragment
    std::string server;  // the region of the server that said it
    std::string describe() const;
  };
  // connect(): takes the servers' layout as this region's (config().fragments and
  // critical_fragment), logging where it differs from the config.
  void adopt(const FragmentLayout& layout);
  void build_segments(LeaderShard& shard) const;
  // A client for server `s`: over config.streams_per_server connections, or, with auto (0), as
  // many as choose_streams() finds for its link.
  std::unique_ptr<wire::Client> open_client(const SyncConfig::Server& s);
  // connect(): full pulls of the shards for which `take` is true; returns the bytes pulled.
  uint64_t pull_at_start(const std::vector<bool>& take);
  // The round this region pushes next for the shard, as its server counts it.
  uint64_t server_round(const LeaderShard& shard) const;
  // The oldest round a pull may see released (staleness bound) when pushing `server_round`.
  uint64_t pull_floor(uint64_t server_round) const;
  // Sends shard i's pull of the change since its version (at least pull_floor(round) released),
  // or of its full values; returns the request id.
  uint64_t send_pull(size_t shard_index, uint64_t round);
  uint64_t send_full_pull(size_t shard_index);
  // The round for the shards in `take`: pushes, then pulls. A server that lost this region is
  // rejoined and the round redone there (redo) in its turn.
  // With `defer`, what has not come within config.shard_wait is deferred.
  void push_and_pull(ConstFloatSpan local, const std::vector<bool>& take, RoundReport& report,
                     uint64_t& released, bool defer);
  // push_and_pull(): the replies of `s` to this exchange's requests (all pushes, and the pulls
  // sent behind them); what has not come when the wait ends is deferred.
  void await_replies(size_t s, const RoundClock& clock, const char* what, RoundReport& report,
                     uint64_t& released);
  // push_and_pull(): the answers in `replies` to the pushes and pulls of the shards on `s`.
  void take_replies(size_t s, const std::map<uint64_t, wire::Reply>& replies, RoundReport& report,
                    uint64_t& released);
  // Shard i stays in flight past this exchange (its server's round noted); its replies are
  // parked until take_ready() or settle() asks for them.
  void defer_shard(size_t shard_index);
  // Sets both classes' codecs to their schedules' codecs of `round` (this region's count).
  void use_codecs(uint64_t round);
  // Encodes and sends shard i's push (delta against base); returns its request id.
  uint64_t send_push(size_t shard_index, ConstFloatSpan local, RoundReport& report);
  // Rejoins `server`, pulls its shards of `take` in full and pushes and pulls them again; up to
  // kMaxRejoinAttempts times, then SystemError.
  void redo(size_t server, ConstFloatSpan local, const std::vector<bool>& take, RoundReport& report,
            uint64_t& released);
  // The server answered `unregistered`: its requests are gone, its shards need full pulls.
  void lose(size_t server, const std::string& why);
  // flush(): one attempt at the flush and the final pulls; FlushServerLost when a server lost
  // this region meanwhile (flush() rejoins it and calls this again).
  struct FlushServerLost;
  void flush_and_pull(FloatSpan local, const MergeSettled& merge_settled, FlushReport& report);
  // flush(): the deferred shards, each flushed once its replies have come and merge_settled
  // has merged it (polling every server for kFlushPoll at a time), within config.timeout.
  void flush_deferred(FloatSpan local, const MergeSettled& merge_settled, FlushReport& report);
  static constexpr std::chrono::milliseconds kFlushPoll{20};
  // flush(): the flush pushes of the shards in `which`, sent, then their answers awaited.
  void flush_shards(const std::vector<bool>& which, ConstFloatSpan local, FlushReport& report);
  // flush(): shard i's flush push (what it owes, fp32); returns its request id.
  uint64_t send_flush(size_t shard_index, ConstFloatSpan local, FlushReport& report);
  // flush(): rejoins and pulls in full, before the flush, the servers that lost this region.
  void resync_before_flush();
  // flush(): every shard's final pull, at most kMaxFinalPulls per server at once.
  void pull_final(FlushReport& report);
  // While one server keeps this region waiting (a partition, a stopped or restarting server), a
  // heartbeat to each other server not contacted within config.heartbeat, so that they do not
  // declare a live region dead (docs/server.md, "Partitions and stopped servers").
  void heartbeat_others(size_t busy);
  // Hello to a server that lost this region (its shards were marked for a full pull then).
  void rejoin(size_t server);
  // Full pulls of the shards of `wanted` on `server` that need one; clears `wanted` for shards
  // whose round it released already. Throws ServerLost (worker/reply_wait.hpp) when it lost this
  // region again.
  void resync(size_t server, std::vector<bool>& wanted, RoundReport* report, uint64_t& released);
  // Decodes a pull reply (all of it, before base changes) into base; `released` takes the min.
  // Returns the version pulled (the caller moves the shard's phase).
  uint64_t apply_pull(size_t shard_index, const wire::Reply& reply, RoundReport* report,
                      uint64_t& released);
  // How replies from `server` are awaited: with heartbeat probes (and the other servers kept
  // alive meanwhile) or without; deferred shards' replies are parked either way (ServerLink).
  ReplyWait waiting(size_t server, bool probe);
  // Deferred shards of `wanted` on `server`: takes the replies that came (waiting up to `wait`
  // for them all) and merges the shards whose pulls are answered; marks them in `merged`.
  // Throws ServerLost when the server lost this region.
  void take_deferred(size_t server, std::chrono::milliseconds wait, const std::vector<bool>& wanted,
                     std::vector<bool>& merged);
  // settle(): the deferred shards of `server`, merged or pulled in full; appends their ranges.
  void settle_server(size_t server, std::vector<ElementRange>& out);
  // A deferred shard merged late goes back to the caller: its next push is in the round its
  // server expects next.
  void hand_back_merged(LeaderShard& shard);

  const ParamTable& layout_;
  SyncConfig config_;
  zmq::context_t& context_;
  std::vector<ServerLink> links_;  // one per server, in config_.servers' order
  std::vector<LeaderShard> shards_;
  std::vector<float> base_;
  std::vector<float> origin_;  // empty: zero
  std::vector<float> delta_;
  compression::ErrorFeedback critical_ef_;
  compression::ErrorFeedback noncritical_ef_;
  // The codec schedules' phases the two ErrorFeedbacks encode with now.
  size_t critical_phase_ = 0, noncritical_phase_ = 0;
  std::vector<uint64_t> rounds_;  // per fragment: the round it pushes next
  uint64_t rejoins_ = 0;
  uint64_t startup_bytes_pulled_ = 0;
  std::stop_token stop_;  // stop_waits_on()
};

}  // namespace geotrain::worker
