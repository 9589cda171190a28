#include "launcher/run/shard_placement.hpp"

#include <algorithm>
#include <functional>
#include <numeric>

#include "core/error.hpp"

namespace geotrain::launcher {

namespace {

// Seconds for `bytes` over from->to: its delay, plus the transfer at its bandwidth.
double link_seconds(const netsim::WanProfile& profile, const std::string& from,
                    const std::string& to, double bytes) {
  const auto& link = profile.link(from, to);
  const double transfer = link.bandwidth_mbps > 0 ? bytes / netsim::bytes_per_s(link) : 0.0;
  return link.delay_ms / 1000.0 + transfer;
}

}  // namespace

double exchange_seconds(const netsim::WanProfile& profile, const std::vector<std::string>& regions,
                        const std::vector<uint32_t>& shards, double bytes) {
  GT_REQUIRE(shards.size() == regions.size(), "placement: {} counts for {} regions", shards.size(),
             regions.size());
  const double total = std::accumulate(shards.begin(), shards.end(), 0.0);
  double round = 0;
  for (size_t j = 0; j < regions.size(); ++j) {
    const double share = bytes * shards[j] / total;  // server j's part of the model
    double arrive = 0, back = 0;
    for (size_t i = 0; i < regions.size(); ++i) {
      if (i == j) continue;
      arrive = std::max(arrive, link_seconds(profile, regions[i], regions[j], share));
      back = std::max(back, link_seconds(profile, regions[j], regions[i], share));
    }
    round = std::max(round, arrive + back);
  }
  return round;
}

Placement best_placement(const netsim::WanProfile& profile, const std::vector<std::string>& regions,
                         uint32_t total, double bytes) {
  const auto n = static_cast<uint32_t>(regions.size());
  GT_REQUIRE(n >= 1 && n <= 8, "placement: {} regions; it plans for 1 to 8", n);
  GT_REQUIRE(total >= n && total <= 32,
             "placement: {} shards for {} regions; give each region at least one, 32 at most",
             total, n);
  Placement best;
  std::vector<uint32_t> counts(n, 1);
  // Every composition of `total` into n parts >= 1, depth first.
  const std::function<void(uint32_t, uint32_t)> visit = [&](uint32_t region, uint32_t left) {
    if (region + 1 == n) {
      counts[region] = left;
      const double t = exchange_seconds(profile, regions, counts, bytes);
      const auto largest = [](const std::vector<uint32_t>& c) {
        return *std::max_element(c.begin(), c.end());
      };
      if (best.shards.empty() || t < best.round_s - 1e-6 ||
          (t <= best.round_s + 1e-6 && largest(counts) < largest(best.shards)))
        best = {counts, t};
      return;
    }
    for (uint32_t c = 1; c + (n - region - 1) <= left; ++c) {
      counts[region] = c;
      visit(region + 1, left - c);
    }
  };
  visit(0, total);
  return best;
}

}  // namespace geotrain::launcher
