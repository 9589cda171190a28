// Shard placement from the links: how many of every fragment's shards each region's server
// should hold (server.shards_per_region {region: count}) so that a synchronous round's exchange
// takes the least time on a WAN whose links differ (docs/deploy.md, "Placing shards on uneven
// links"; `geotrain place`).
//
// The model of a round (fp32 or any codec: `bytes` is what one leader pushes in a round, and
// pulls back): every leader i pushes server j its share x_j of the model over link i->j; server j
// releases the round when the last push has arrived, then sends each leader i its share back
// over j->i. With bandwidth b and one-way delay d per directed link,
//     arrive_j = max_{i != j} (x_j bytes / b(i->j) + d(i->j))
//     round    = max_j (arrive_j + max_{i != j} (x_j bytes / b(j->i) + d(j->i)))
// A region's own server costs nothing (the leader and its server share a LAN). Links without a
// bandwidth (0: unlimited) cost their delay only. It ignores per-connection windows (the leaders
// open enough streams to fill a link: docs/deploy.md, "Streams and socket buffers") and the
// compute a round overlaps. Pure functions; no state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "netsim/config.hpp"

namespace geotrain::launcher {

struct Placement {
  std::vector<uint32_t> shards;  // per region, in the regions' order
  double round_s = 0;            // the modelled exchange of a synchronous round
};

// The modelled exchange time of `shards` (each >= 1, parallel to `regions`) for a round of
// `bytes` per leader on `profile` (InputError when a pair of regions has no link in it).
double exchange_seconds(const netsim::WanProfile& profile, const std::vector<std::string>& regions,
                        const std::vector<uint32_t>& shards, double bytes);

// Of every way to give `total` shards to `regions` (each at least 1; regions.size() <= total <=
// 32, at most 8 regions), the one with the least exchange_seconds; within a microsecond, the
// most even (the smallest largest count). InputError on a total or a fleet out of range.
Placement best_placement(const netsim::WanProfile& profile, const std::vector<std::string>& regions,
                         uint32_t total, double bytes);

}  // namespace geotrain::launcher
