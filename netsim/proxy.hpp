// WanProxy: the WAN emulator. One TCP listener per directed link, forwarding every accepted
// connection to the link's target with the link's delay, jitter, bandwidth, window and faults.
//
// Owns the listeners, all proxied connections and one event-loop thread (epoll, non-blocking
// sockets, per-connection delivery queues ordered by time; no busy-waiting). The constructor
// binds the listeners (so listen_port() is known at once; throws SystemError when a bind fails,
// InputError for bad link properties); start() starts the thread and the fault clock; stop()
// (or the destructor) ends it and closes every connection. listen_port() and stats() are
// thread-safe; start()/stop() are meant for the owning thread.
//
// Model, per lane (direction) of a link, for a chunk of n bytes read at time t:
//   released  = bucket.reserve(n, t)                    (shared by all connections of the link)
//   delivered = max(previous delivery, released + delay + jitter)   (no reordering)
// With a window W, a connection stops reading once W bytes are in flight; bytes leave the
// window one one-way delay after they were written to the destination (their ack's return).
// With zero delay, no bandwidth limit and no window, bytes are forwarded as soon as read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "netsim/link.hpp"
#include "netsim/stats.hpp"

namespace geotrain::netsim {

struct ProxyOptions {
  uint64_t seed = 1;                                 // jitter streams (one per lane, derived)
  std::optional<std::filesystem::path> stats_jsonl;  // append interval records here when set
  double stats_interval_s = 0;                       // report period; 0 = no periodic report
  bool log_stats = true;                             // a log line per link per report
  // Fault times (at_s, until_s) count from this Unix time (seconds) instead of from start(), so
  // that a netsim restarted mid-run keeps the schedule it started with: faults already over are
  // applied at once, in order (a partition still under way goes on until its end).
  std::optional<double> faults_origin_unix_s;
};

class WanProxy {
 public:
  WanProxy(std::vector<LinkConfig> links, ProxyOptions options);
  ~WanProxy();
  WanProxy(const WanProxy&) = delete;
  WanProxy& operator=(const WanProxy&) = delete;

  std::size_t link_count() const;
  uint16_t listen_port(std::size_t link) const;
  Endpoint listen_endpoint(std::size_t link) const;

  void start();
  void stop();  // idempotent; joins the thread and closes all connections

  std::vector<LinkStats> stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace geotrain::netsim
