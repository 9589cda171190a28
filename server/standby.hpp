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
// This file: the Replica's frames (written and read, each refusal naming what is wrong), the
// primary's encoder of them and its side of the link, StandbyLink. The standby's side is
// ParamServer's (param_server_standby.cpp). Not thread-safe: the server loop's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "compression/codec.hpp"
#include "server/config.hpp"
#include "server/shard.hpp"
#include "wire/client.hpp"
#include "wire/context.hpp"
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

// The primary's replicas (server.standby.codec): with fp32 every replica is replica_of()'s exact
// values; with a lossy codec, the change of each shard's values (and momentum) since the last
// replica, through that codec with error feedback (the residual carried to the next replica, as
// on the downlink), so the standby's copy trails the primary's by one codec step at most; and the
// exact values every `anchor_every` replicas, at the first, and after the standby refused a
// change (it lacked its base: restarted). The standby's copy after a change is exactly what this
// encoder believes it is (both add the same decoded change to the same floats).
class ReplicaEncoder {
 public:
  ReplicaEncoder(const std::string& codec_spec, uint64_t anchor_every);
  ReplicaMessage next(const std::vector<Shard>& shards, bool momentum);
  // The next replica carries the values themselves.
  void anchor_next() { anchor_due_ = true; }

 private:
  // One span's replica stream: what the standby holds of it, and the error-feedback residual.
  struct Stream {
    std::vector<float> held, residual;
  };
  // The change of `now` since `s.held` (plus the residual) as a payload; `s` moved on by it.
  wire::Frame change(ConstFloatSpan now, Stream& s);
  void anchor(ConstFloatSpan now, Stream& s);

  std::unique_ptr<compression::Codec> codec_;  // null: fp32, every replica exact
  uint64_t anchor_every_;
  uint64_t since_anchor_ = 0;
  bool anchor_due_ = true;
  struct ShardStreams {
    Stream values, momentum;
    uint64_t version = 0;  // of the last replica sent
  };
  std::map<uint32_t, ShardStreams> streams_;  // by shard id
  Bytes scratch_;
  std::vector<float> decoded_;
};
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
  StandbyLink(const ServerConfig& config, uint32_t region, wire::Context& context);

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
  // Replies come in order; a Replaced one throws; any other refusal makes the next replica an
  // anchor.
  void check(const wire::Reply& reply);
  void drain();
  // The reply to request `id`, waiting up to `wait` (nullopt: none came); the others that come
  // first are checked.
  std::optional<wire::Reply> await(uint64_t id, std::chrono::milliseconds wait);

  std::string region_;
  std::string endpoint_;
  uint64_t every_rounds_;
  std::chrono::milliseconds heartbeat_;
  std::unique_ptr<wire::Client> client_;
  ReplicaEncoder encoder_;
  uint64_t sent_round_ = 0;  // the released round of the last replica sent
  bool resend_ = false;      // the standby refused the last one: the values go at once
  std::optional<TimePoint> last_send_;
  uint64_t bytes_sent_ = 0;
  uint64_t replicas_sent_ = 0;
};

}  // namespace geotrain::server
