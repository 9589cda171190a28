// ParamServer: one region's server process. Owns a ROUTER channel, the shards this region owns
// (ShardMap), membership of the regions, parked requests, checkpoints and metrics.
//
// Every message is validated before it changes anything; a bad one gets an Error reply naming
// the problem (wire/messages.hpp ErrorCode) and leaves every shard, clock and counter but the
// region's error count as it was. Messages other than Hello from a peer that has not registered
// (or whose region was marked dead since) are refused with `unregistered`.
// Requests that must wait - a push beyond the staleness gate, a pull for a round not yet
// released - are parked (server/parked_requests.hpp: bounded per peer and for peers that are no
// region's) and retried after every change.
//
// Threads: run() is the loop and blocks until stop is requested or a Shutdown arrives; every
// other method is for that loop's thread (tests read state through StatsRequest, or after run()
// returned). A server with a shard of kSplitElements or more also owns one helper thread
// (PassSplitter) that runs half of a push's or pull's pass while the loop thread runs the other.
// The clock is injectable so tests decide when a silent region is dead.
// Who may connect (CURVE keys, the connection cap) is server/admission.hpp's; the workers'
// key-value rendezvous is server/rendezvous_store.hpp's; the end of a run's flush is in
// param_server_flush.cpp; checkpoints and the shards at the start in param_server_state.cpp;
// standby shards in param_server_standby.cpp (server/standby.hpp).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "core/param_table.hpp"
#include "server/admission.hpp"
#include "server/answered_ledger.hpp"
#include "server/checkpoint.hpp"
#include "server/config.hpp"
#include "server/membership.hpp"
#include "server/metrics.hpp"
#include "server/parked_requests.hpp"
#include "server/payload_pool.hpp"
#include "server/push_payload.hpp"
#include "server/rendezvous_store.hpp"
#include "server/shard.hpp"
#include "server/standby.hpp"
#include "wire/channel.hpp"
#include "wire/context.hpp"
#include "wire/messages.hpp"
#include "wire/metrics_endpoint.hpp"
#include "wire/zap_authenticator.hpp"

namespace geotrain::server {

// The most rounds one push may sit out (wire::Push::skip): about a day of rounds of a second; a
// push asking for more names a round nobody will reach.
inline constexpr uint64_t kMaxRoundsSatOut = 1u << 17;

using Clock = std::function<std::chrono::steady_clock::time_point()>;

struct ServerOptions {
  std::optional<std::string> endpoint;  // overrides config.endpoints[region] (tests: inproc://)
  Clock clock = [] { return std::chrono::steady_clock::now(); };
  bool write_metrics = true;           // JSONL under config.run_dir
  std::chrono::milliseconds poll{20};  // loop tick: liveness sweeps run at least this often
  // With security.curve on: the ZAP handler of `context` to use, when several servers share one
  // context (tests; handshake failures before ZAP are then not logged); null: the server makes
  // its own (one per context).
  wire::ZapAuthenticator* authenticator = nullptr;
  // A loop tick that ran this much longer than its poll (the process was stopped by SIGSTOP, or
  // starved of CPU) is time in which the server read nobody's messages: membership does not count
  // it as the regions' silence (Membership::excuse), so nobody is declared dead for it. Measured
  // with the real steady clock, whatever `clock` is; 0 = off (tests that move a manual clock on
  // purpose). `geotrain server` sets it to server.heartbeat_ms.
  std::chrono::milliseconds excuse_stalls_over{0};
  // This server is the standby of `region`'s shards (server/standby.hpp), run in another region's
  // server process: it listens at config.standby.endpoints[region] (unless `endpoint` is given),
  // keeps its primary's replicas, and serves the shards only once it has taken them over.
  bool standby = false;
};

class ParamServer {
 public:
  ParamServer(const ServerConfig& config, uint32_t region, wire::Context& context,
              ServerOptions options = {});

  std::string endpoint() const { return channel_->endpoint(); }
  // The Prometheus endpoint's port (server.metrics_port), if this server has one.
  std::optional<uint16_t> metrics_port() const {
    return metrics_endpoint_ ? std::optional(metrics_endpoint_->port()) : std::nullopt;
  }
  uint64_t table_hash() const { return table_.layout_hash(); }
  const std::vector<Shard>& shards() const { return shards_; }

  void run(std::stop_token stop);
  // Handles at most one message (after waiting up to `timeout`), sweeps liveness and retries
  // parked requests. Returns false once a Shutdown was received.
  bool step(std::chrono::milliseconds timeout);
  // Writes a checkpoint of every shard now; returns the round it records.
  uint64_t checkpoint();
  // A standby (ServerOptions::standby) that serves its shards now: it took them over.
  bool serving() const { return serving_; }

 private:
  // done: state changed; answered: replied, nothing changed; refused: answered with an Error,
  // nothing changed.
  enum class Outcome { done, answered, park, refused };

  Outcome handle(wire::Envelope& env,
                 std::optional<std::chrono::steady_clock::time_point> parked_since);
  Outcome dispatch(const std::string& peer, const wire::Header& h,
                   std::span<const wire::Frame> payloads,
                   std::optional<std::chrono::steady_clock::time_point> parked_since);
  void on_hello(const std::string& peer, const wire::Header& h, const wire::Hello& m);
  Outcome on_push(uint32_t r, const wire::Header& h, const wire::Push& m,
                  std::span<const wire::Frame> payloads,
                  std::optional<std::chrono::steady_clock::time_point> parked_since);
  Outcome on_pull(uint32_t r, const wire::Header& h, const wire::PullRequest& m);
  // A push with `absent` (wire::Push::absent): the region sits out the rounds up to its round.
  Outcome on_absent(uint32_t r, const wire::Header& h, const wire::Push& m, Shard& shard);
  // The end of a run (server/param_server_flush.cpp, docs/protocol.md "The flush"): a push with
  // `flush` (header checked by on_push), and the checks of a pull with `after_flush`.
  Outcome on_flush(uint32_t r, const wire::Header& h, const wire::Push& m,
                   std::span<const wire::Frame> payloads);
  void check_final_pull(uint32_t r, const Shard& shard, const wire::PullRequest& m,
                        uint64_t request_id) const;
  // Releases every shard's flush that waits for no live region any more.
  void release_flushes(const std::vector<bool>& live_now);
  // The live regions that count in the shard's rounds and gate: not those that flushed it, which
  // push no more rounds there (as after a goodbye; one that waits for the others' flushes must not
  // hold back a round they still push).
  static std::vector<bool> in_rounds(const Shard& shard, std::vector<bool> live);
  // The longest time the server has heard nothing from one of `regions`, in ms (0: none), for
  // wire::PushReply::awaited_silence_ms: a leader does not wait on a round held for a region
  // that is silent (cut off from this server, or its leader dead) rather than late.
  uint32_t longest_silence_ms(const std::vector<size_t>& regions) const;
  Shard& shard_for(uint32_t id, uint64_t request_id);
  void reply(const std::string& peer, uint64_t request_id, wire::Body body,
             std::vector<wire::Frame> payloads = {});
  void reply_error(const std::string& peer, uint64_t request_id, wire::ErrorCode code,
                   const std::string& message);
  void release_rounds();
  bool sweep();  // true when a region was declared dead
  // options_.excuse_stalls_over: `waited_from` is when this tick's receive began, `timeout` what
  // it asked for; a tick (with the previous tick's work) that overran by more is excused. Called
  // again after the tick's message with a timeout of 0, so that its work is excused before the
  // sweep.
  // `what` names it in the log ("did not run", "was busy with one message").
  void excuse_own_stall(std::chrono::steady_clock::time_point waited_from,
                        std::chrono::milliseconds timeout, const char* what);
  void retry_parked();
  // Standby shards (server/standby.hpp; param_server_standby.cpp). The standby's side: a replica
  // from its primary, the primary's TakeBack, and a leader's hello while the primary may be alive
  // (true: go on, it serves now; refused otherwise).
  Outcome on_replica(const std::string& peer, const wire::Header& h, const wire::Replica& m,
                     std::span<const wire::Frame> payloads);
  Outcome on_take_back(const std::string& peer, const wire::Header& h);
  bool take_over(const wire::Header& h);
  // WireError{malformed} unless this server is a standby: "<what> sent to the primary server of
  // region R: only a standby <does>".
  void require_standby(const wire::Header& h, const char* what, const char* does) const;
  // The primary's side: at the start, the shards from the standby when they are newer than
  // `checkpoint_round` (returns whether it restored them); after a stall, whether the standby took
  // over (Replaced); after every step, the next replica or heartbeat.
  bool take_back(std::optional<uint64_t> checkpoint_round);
  void after_stall(std::chrono::milliseconds stalled);
  // Who counts as registered starts afresh (a standby's takeover and hand-back).
  void forget_regions(const std::string& why);
  void forget_parked(const std::string& peer, const std::string& why);
  std::vector<bool> live() const { return membership_.live(); }
  nlohmann::json stats() const;
  void restore();

  ServerConfig config_;
  uint32_t region_;
  ServerOptions options_;
  // Where the socket binds, resolved and checked before anything is written (the metrics log).
  std::string listen_at_;
  ParamTable table_;
  ShardMap map_;
  std::vector<Shard> shards_;
  // Who may connect (server/admission.hpp). Declared before channel_: its ZAP handler must exist
  // before the socket binds and outlive it.
  Admission admission_;
  std::unique_ptr<wire::Channel> channel_;
  Membership membership_;
  ParkedRequests parked_;
  AnsweredLedger answered_;  // what each region's connection was answered last (heartbeat replies)
  RendezvousStore kv_;       // the workers' rendezvous (open to every peer, bounded)
  CheckpointStore checkpoints_;
  uint64_t last_checkpoint_round_ = 0;
  ServerMetrics metrics_;
  // server.metrics_port: GET /metrics (Prometheus), answered by step() between messages.
  std::unique_ptr<wire::MetricsEndpoint> metrics_endpoint_;
  PushPayload push_payload_;                // reads pushes' deltas (scratch for decoded ones)
  PayloadPool pool_;                        // pull reply payloads, reused once ZeroMQ sent them
  std::unique_ptr<PassSplitter> splitter_;  // second thread for the passes of large shards, if any
  bool shutdown_ = false;
  // Standby shards: a primary's link to its standby; a standby's state.
  std::unique_ptr<StandbyLink> standby_link_;
  bool serving_ = true;  // a standby: false until it takes its shards over
  bool has_replica_ = false;
  TimePoint primary_heard_{};
  uint64_t takeovers_ = 0;
  bool sat_out_ = false;  // a push sat rounds out since the last step(): retry the parked
  std::optional<std::chrono::steady_clock::time_point> last_receive_end_;  // real clock
};

}  // namespace geotrain::server
