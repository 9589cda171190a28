// ServerLinks: a region leader's connections to every server (one ServerLink each, in the
// config's order) and what keeps them alive (docs/server.md, "Partitions and stopped servers"):
// while one server keeps the leader waiting, a heartbeat to each other server not contacted
// within the heartbeat period, so that they do not declare a live region dead; the heartbeat of
// an idle leader; the rejoin of a server that lost this region; the goodbye at the end.
// RegionSync's shards talk through them.
//
// Blocking: open(), rejoin(), probe_if_quiet() and goodbye() wait on the network (see each).
// Not thread-safe: RegionSync's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <vector>

#include "wire/context.hpp"
#include "worker/leader/reply_wait.hpp"
#include "worker/leader/server_link.hpp"
#include "worker/leader/sync_config.hpp"

namespace geotrain::worker {

class ServerLinks {
 public:
  // Links to config.servers (InputError when there are none); with a fixed
  // config.streams_per_server, connected now (ZeroMQ connects in the background), with auto (0) at
  // open().
  ServerLinks(const SyncConfig& config, wire::Context& context);

  size_t size() const { return links_.size(); }
  ServerLink& operator[](size_t s) { return links_[s]; }
  const ServerLink& operator[](size_t s) const { return links_[s]; }
  auto begin() { return links_.begin(); }
  auto end() { return links_.end(); }

  // Every wait from now on ends with Stopped once `stop` is requested
  // (worker/leader/reply_wait.hpp).
  void stop_waits_on(std::stop_token stop) { stop_ = std::move(stop); }
  // A connection to each server that has none yet: with streams_per_server auto, the round trip
  // to it is measured first (choose_streams), waiting up to config.timeout for it to come up.
  void open();
  // How replies from server s are awaited: with heartbeat probes every config.heartbeat of
  // silence (the other servers kept alive meanwhile) or without.
  ReplyWait waiting(size_t s, bool probe);
  // A heartbeat to each server but `busy` not contacted within config.heartbeat (fire and forget).
  void heartbeat_others(size_t busy);
  // Hello to server s, which lost this region, re-sent until answered (ServerLink::rejoin), or,
  // given `within`, until that has passed (nullopt: still away); logged and counted. Returns its
  // answer.
  std::optional<wire::HelloReply> rejoin(size_t s, const wire::Hello& hello,
                                         std::optional<std::chrono::milliseconds> within = {});
  // At connect, for a server with a standby: hello to both, re-sent every heartbeat until one
  // answers (the one serving its shards) or `timeout` passes (SystemError).
  wire::HelloReply hello_either(size_t s, const wire::Hello& hello,
                                std::chrono::milliseconds timeout);
  // How often a server was rejoined.
  uint64_t rejoins() const { return rejoins_; }
  // A heartbeat to server s when it has not been contacted within config.heartbeat and has no
  // deferred shard's request in flight (those are probed by the waits for their replies), its
  // answer awaited up to config.timeout. ServerLost when it lost this region.
  void probe_if_quiet(size_t s);
  // Goodbye to every server still registered, each answer awaited up to `wait`; logs what did not
  // answer, never throws.
  void goodbye(std::chrono::milliseconds wait);

 private:
  // Attaches server s's connection (and its standby's, with server.standby) over `streams` each.
  void connect(size_t s, uint32_t streams);

  SyncConfig config_;
  wire::Context& context_;
  std::vector<ServerLink> links_;
  std::stop_token stop_;
  uint64_t rejoins_ = 0;
};

}  // namespace geotrain::worker
