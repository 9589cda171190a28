#include "server/shard_map.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace geotrain::server {

ShardMap::ShardMap(uint64_t elements, uint32_t regions, uint32_t shards_per_region, uint64_t chunk)
    : elements_(elements), chunk_(chunk) {
  GT_REQUIRE(regions > 0, "shard map: regions is 0, need at least one region");
  GT_REQUIRE(shards_per_region > 0 && shards_per_region <= 1024,
             "shard map: shards_per_region is {}, must be in [1, 1024]", shards_per_region);
  GT_REQUIRE(chunk > 0, "shard map: chunk is 0, must be positive");
  const uint64_t n = uint64_t{regions} * shards_per_region;
  const uint64_t chunks = (elements + chunk - 1) / chunk;
  // Boundary i is the chunk boundary nearest to i/n of the buffer, in whole chunks: sizes differ
  // by at most one chunk (plus the shorter last chunk).
  uint64_t prev = 0;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t end_chunk = (chunks * (i + 1) + n / 2) / n;
    uint64_t end = std::min(elements, end_chunk * chunk);
    if (i + 1 == n) end = elements;
    end = std::max(end, prev);
    shards_.push_back(
        {static_cast<uint32_t>(i), prev, end - prev, static_cast<uint32_t>(i / shards_per_region)});
    prev = end;
  }
}

std::vector<ShardRange> ShardMap::owned_by(uint32_t region) const {
  std::vector<ShardRange> out;
  for (const auto& s : shards_)
    if (s.region == region) out.push_back(s);
  return out;
}

}  // namespace geotrain::server
