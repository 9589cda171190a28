// Per-link statistics of a WanProxy: plain snapshot structs, their JSONL form, and the
// interval arithmetic used for the periodic report.
//
// One JSONL record per link per report interval (see docs/netsim.md, "Statistics"):
//   {"t_s":2.0,"link":"us-east->eu-west","connections_open":1,"connections_total":3,
//    "forward":{"bytes":..,"mbps":..,"queue_ms_mean":..,"queue_ms_max":..},"reverse":{..},
//    "bytes_dropped":0}
// Plain values; no thread-safety concerns.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace geotrain::netsim {

struct LaneStats {
  uint64_t bytes = 0;         // delivered to the destination socket, cumulative
  uint64_t chunks = 0;        // chunks read on the slow path (each one gets a queueing delay)
  uint64_t queue_ns_sum = 0;  // sum over chunks of the wait for bandwidth tokens
  uint64_t queue_ns_max = 0;  // largest such wait so far
};

struct LinkStats {
  std::string name;  // "from->to"
  uint64_t connections_open = 0;
  uint64_t connections_total = 0;
  uint64_t bytes_dropped = 0;  // discarded by a blackhole or a reset
  LaneStats forward;           // client -> target
  LaneStats reverse;           // target -> client
};

// One JSONL record for the interval between `before` and `now` (dt_s seconds), at t_s after
// start: throughput and mean queueing delay over the interval, totals and maxima cumulative.
nlohmann::json interval_record(const LinkStats& before, const LinkStats& now, double t_s,
                               double dt_s);

}  // namespace geotrain::netsim
