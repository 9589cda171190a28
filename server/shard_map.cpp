#include "server/shard_map.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/fragments.hpp"

namespace geotrain::server {

ShardMap::ShardMap(uint64_t elements, uint32_t regions, uint32_t shards_per_region, uint64_t chunk,
                   uint32_t fragments)
    : elements_(elements), chunk_(chunk) {
  GT_REQUIRE(regions > 0, "shard map: regions is 0, need at least one region");
  GT_REQUIRE(shards_per_region > 0 && shards_per_region <= 1024,
             "shard map: shards_per_region is {}, must be in [1, 1024]", shards_per_region);
  GT_REQUIRE(chunk > 0, "shard map: chunk is 0, must be positive");
  const uint64_t n = uint64_t{regions} * shards_per_region;
  // Boundary i is the chunk boundary nearest to i/n of the fragment, in whole chunks: sizes
  // differ by at most one chunk (plus the shorter last chunk).
  const auto frags = fragment_ranges(elements, fragments, chunk);
  for (uint32_t f = 0; f < frags.size(); ++f) {
    const uint64_t first_chunk = frags[f].offset / chunk;
    const uint64_t chunks = (frags[f].end() + chunk - 1) / chunk - first_chunk;
    // An empty fragment (the table has fewer chunks than fragments) gets empty shards at its
    // offset, as the surplus shards of a small table do without fragments.
    const auto parts = frags[f].count == 0
                           ? std::vector<ElementRange>(n, ElementRange{frags[f].offset, 0})
                           : split_chunks(first_chunk, chunks, n, chunk, frags[f].end());
    for (uint64_t i = 0; i < n; ++i)
      shards_.push_back({static_cast<uint32_t>(shards_.size()), parts[i].offset, parts[i].count,
                         static_cast<uint32_t>(i / shards_per_region), f});
  }
}

std::vector<ShardRange> ShardMap::owned_by(uint32_t region) const {
  std::vector<ShardRange> out;
  for (const auto& s : shards_)
    if (s.region == region) out.push_back(s);
  return out;
}

}  // namespace geotrain::server
