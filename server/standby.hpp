// Standby shards (docs/server.md, "Standby shards"; server.standby, core/deployment_keys.hpp).
//
// Every region's shards have a standby: a second ParamServer for that region
// (ServerOptions::standby) that runs in the next region's server process, at
// server.standby.endpoints[region]. Its primary (the region's own server) keeps it current with a
// Replica of every shard (version, released round, values and momentum, fp32) after every
// server.standby.every_rounds released rounds, and a Replica of no shard (a heartbeat) after every
// heartbeat period without one. The standby refuses leaders (Error{not_serving}) until its primary
// has been silent for server.standby.takeover_after_ms and a leader says hello: then it serves the
// shards from the replica, as a server restarted from a checkpoint would (the leaders resync with
// a full pull), and answers its primary's next Replica with Error{replaced}. A primary so replaced
// (it was stopped, or cut off from its standby and its leaders) leaves: its process exits and is
// restarted. A primary that starts asks its standby for its shards (TakeBack): the standby hands
// back what it holds, newest first, stops serving, and the primary restores from it when it is
// newer than its own checkpoint.
//
// This file: the Replica's frames (written and read, each refusal naming what is wrong) and the
// primary's side, StandbyLink. The standby's side is ParamServer's (param_server_standby.cpp).
// Not thread-safe: the server loop's thread.
#pragma once

#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "server/config.hpp"
#include "server/shard.hpp"
#include "wire/client.hpp"
#include "wire/messages.hpp"

namespace geotrain::server {

// A primary whose standby serves its shards now: it must not serve them too.
class Replaced : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The shards' state as a Replica and its frames (values, then momentum when the outer optimizer
// has any).
struct ReplicaMessage {
  wire::Replica replica;
  std::vector<wire::Frame> frames;
};
ReplicaMessage replica_of(const std::vector<Shard>& shards, bool momentum, uint64_t epoch);
// Checks a Replica against `shards` (every id one of theirs, once; frames of the right count and
// sizes; values finite) and restores them from it: WireError{malformed / bad_shard / bad_payload}
// naming the problem, with nothing restored. Returns the lowest released round it restored (0 for
// a heartbeat).
uint64_t restore_from_replica(std::vector<Shard>& shards, const wire::Replica& replica,
                              std::span<const wire::Frame> frames, uint64_t request_id);

// The lowest released round of `shards` (0 for none).
uint64_t released_of(const std::vector<Shard>& shards);

// The primary's connection to its standby.
class StandbyLink {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // Connects to config.standby.endpoints[region] (InputError when it has none).
  StandbyLink(const ServerConfig& config, uint32_t region, zmq::context_t& context);

  const std::string& endpoint() const { return endpoint_; }

  struct TakenBack {
    wire::Replica replica;
    std::vector<wire::Frame> frames;
  };
  // At the primary's start: asks the standby for the shards, waiting up to `wait` (a standby that
  // is down or unreachable: nullopt, and the checkpoint applies). A standby that holds none
  // answers with a heartbeat's Replica (no shard).
  std::optional<TakenBack> take_back(std::chrono::milliseconds wait);

  // After the loop's step: a Replica of `shards` when every_rounds rounds were released since the
  // last one, else a heartbeat when none was sent for a heartbeat period. Never blocks (a full
  // send queue skips it). Throws Replaced when the standby has answered Error{replaced}.
  void pump(const std::vector<Shard>& shards, bool momentum, TimePoint now);
  // After the loop did not run for a while (SIGSTOP): asks the standby whether it serves the
  // shards now, waiting up to `wait`; Replaced if so. A standby that does not answer: it cannot
  // have taken over either, unless it is cut off (then the leaders cannot reach it either).
  void confirm(std::chrono::milliseconds wait);

  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t replicas_sent() const { return replicas_sent_; }

 private:
  // Replies come in order; a Replaced one throws.
  void check(const wire::Reply& reply) const;
  void drain();

  std::string region_;
  std::string endpoint_;
  uint64_t every_rounds_;
  std::chrono::milliseconds heartbeat_;
  std::unique_ptr<wire::Client> client_;
  uint64_t sent_round_ = 0;  // the released round of the last replica sent
  std::optional<TimePoint> last_send_;
  uint64_t bytes_sent_ = 0;
  uint64_t replicas_sent_ = 0;
};

}  // namespace geotrain::server
