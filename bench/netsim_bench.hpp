// `geotrain bench netsim`: for every directed link of the standard WAN profiles, the configured
// delay, bandwidth and window against what a client measures through a real WanProxy on
// loopback (echo round trips, a bulk transfer, a single window-limited flow). Durations are
// scaled down (about `seconds` per measurement) and rates above `max_mbps` are measured at
// max_mbps. First, the proxy's own cost: round trips and forwarding rate on a zero-delay link
// against the same without the proxy, measured alongside. Blocks until done; prints a table or
// one JSON document to stdout.
#pragma once

#include <string>
#include <vector>

namespace geotrain::bench {

struct NetsimBenchOptions {
  std::string profiles_dir;           // empty: the source tree's configs/wan
  std::vector<std::string> profiles;  // empty: lan us-eu global-3 global-3-100m scarce gaia
  double seconds = 1.0;               // per bulk measurement
  double max_mbps = 1000;             // cap on measured rates
  bool proxy_cost = true;             // also the proxy's own round trip and forwarding rate
  bool json = false;
};

int run_netsim_bench(const NetsimBenchOptions& options);

}  // namespace geotrain::bench
