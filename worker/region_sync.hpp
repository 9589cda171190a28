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
// Blocking: connect() and exchange() block on the network, up to `timeout` per reply (a missing
// reply is a SystemError naming the server). Not thread-safe: one thread (see OverlappedSync
// for running it in the background). Buffers: base() is owned here; callers pass spans in.
#pragma once

#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compression/error_feedback.hpp"
#include "core/param_table.hpp"
#include "core/span.hpp"
#include "wire/client.hpp"

namespace geotrain::worker {

struct SyncConfig {
  std::string region;  // this region's name, as in the config's `regions`
  struct Server {
    std::string region;
    std::string endpoint;
  };
  std::vector<Server> servers;  // every region's server (the leader talks to all of them)
  std::string critical_codec = "onebit";
  std::string noncritical_codec = "int8";
  uint32_t staleness_bound = 0;
  std::chrono::milliseconds timeout{60'000};  // per reply
  std::chrono::milliseconds heartbeat{1'000};
};

struct RoundReport {
  uint64_t round = 0;
  uint64_t bytes_pushed = 0;    // payload bytes sent (frames after the header)
  uint64_t bytes_pulled = 0;    // payload bytes received
  double push_seconds = 0;      // first push sent -> last push reply
  double pull_seconds = 0;      // first pull sent -> last pull reply
  uint32_t max_staleness = 0;   // the largest staleness a server reported for our pushes
  uint64_t gate_wait_us = 0;    // the longest time a push waited at a server's gate
  uint64_t released_round = 0;  // the oldest round released among the pulled shards
};

class RegionSync {
 public:
  RegionSync(const ParamTable& layout, SyncConfig config, zmq::context_t& context);
  ~RegionSync();
  RegionSync(const RegionSync&) = delete;
  RegionSync& operator=(const RegionSync&) = delete;

  // The servers hold the sum of all applied deltas, starting from zero. Every region starts
  // its model from the same deterministic initialisation (the config's seed), so the global
  // parameters are origin + server values: a full pull sets base = origin + values. Call before
  // connect(); without it the origin is zero. InputError on a size mismatch.
  void set_origin(ConstFloatSpan origin);

  // Registers with every server and pulls full values into base(). Returns the round the
  // region pushes next (1 for a fresh start, later after a rejoin).
  uint64_t connect();

  // One round: pushes local - base, pulls the new values into base. Returns what it measured.
  RoundReport exchange(ConstFloatSpan local);

  // Sends a heartbeat to servers not contacted within config.heartbeat. Cheap; call between steps.
  void keep_alive();

  ConstFloatSpan base() const { return base_; }
  uint64_t next_round() const { return round_; }
  const SyncConfig& config() const { return config_; }

 private:
  struct Segment {
    uint64_t offset;  // relative to the shard
    uint64_t count;
    bool critical;
    uint64_t stream;  // EF residual stream id
  };
  struct ShardState {
    uint32_t id;
    uint64_t offset;  // in the flat buffer
    uint64_t count;
    size_t server;         // index into servers_
    uint64_t version = 0;  // last version pulled
    std::vector<Segment> segments;
  };
  struct ServerLink {
    std::string region;
    std::unique_ptr<wire::Client> client;
    std::chrono::steady_clock::time_point last_contact;
  };

  // Pull requests sent and not yet answered: request ids per server, and the shard of each
  // (request ids are per server connection, so both are kept per server).
  struct Pulls {
    std::vector<std::vector<uint64_t>> ids;
    std::vector<std::map<uint64_t, size_t>> shard_of;
  };
  // Pipelining a shard's pull behind its push keeps two requests waiting at its server.
  static constexpr size_t kMaxPipelinedShards = 2;

  void build_segments(ShardState& shard) const;
  Pulls send_pulls(bool full, uint64_t min_round, const std::vector<bool>& servers);
  // Decodes a pull reply (all of it, before base changes) into base; `released` takes the min.
  void apply_pull(size_t shard_index, const wire::Reply& reply, RoundReport* report,
                  uint64_t& released);
  void pull_into_base(bool full, uint64_t min_round, RoundReport* report);

  const ParamTable& layout_;
  SyncConfig config_;
  std::vector<ServerLink> servers_;
  std::vector<ShardState> shards_;
  std::vector<float> base_;
  std::vector<float> origin_;  // empty: zero
  std::vector<float> delta_;
  compression::ErrorFeedback critical_ef_;
  compression::ErrorFeedback noncritical_ef_;
  uint64_t round_ = 1;
};

}  // namespace geotrain::worker
