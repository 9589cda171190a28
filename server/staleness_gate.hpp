// StalenessGate: per-region round clocks of one shard and the bounded-staleness rule.
//
// clock(r) is the last round region r pushed. A push of round t is admitted when
//     t <= slowest + s + 1,   slowest = min clock over live regions,
// i.e. a region may run at most s rounds ahead of the slowest live region; a push beyond that
// waits (the server parks it and retries it when clocks or liveness change); it is never refused.
// Under the quorum policy the bound counts from max(slowest, released round) instead.
// The staleness of an admitted push is tau = max(0, max clock of the other live regions - t):
// how many rounds the most advanced live region is ahead of it (0 in lockstep, at most s).
// Dead regions neither hold the gate nor count for tau. Plain value type, not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace geotrain::server {

class StalenessGate {
 public:
  StalenessGate(size_t regions, uint32_t bound) : clocks_(regions, 0), bound_(bound) {}

  uint32_t bound() const { return bound_; }
  uint64_t clock(size_t region) const { return clocks_.at(region); }
  void set_clock(size_t region, uint64_t round) { clocks_.at(region) = round; }
  const std::vector<uint64_t>& clocks() const { return clocks_; }

  std::optional<uint64_t> slowest(const std::vector<bool>& live) const {
    std::optional<uint64_t> s;
    for (size_t r = 0; r < clocks_.size(); ++r)
      if (live[r] && (!s || clocks_[r] < *s)) s = clocks_[r];
    return s;
  }
  // `floor` raises the slowest clock the bound counts from: the quorum policy passes the released
  // round, so that a region behind it holds nobody back (server/consistency.hpp).
  bool admits(uint64_t round, const std::vector<bool>& live, uint64_t floor = 0) const {
    auto s = slowest(live);
    return !s || round <= std::max(*s, floor) + bound_ + 1;
  }
  uint32_t staleness(size_t region, uint64_t round, const std::vector<bool>& live) const {
    uint64_t ahead = 0;
    for (size_t q = 0; q < clocks_.size(); ++q)
      if (q != region && live[q] && clocks_[q] > round) ahead = std::max(ahead, clocks_[q] - round);
    return static_cast<uint32_t>(ahead);
  }

 private:
  std::vector<uint64_t> clocks_;
  uint32_t bound_;
};

}  // namespace geotrain::server
