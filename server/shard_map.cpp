#include "server/shard_map.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/fragments.hpp"

namespace geotrain::server {

ShardMap::ShardMap(uint64_t elements, uint32_t regions, uint32_t shards_per_region, uint64_t chunk,
                   uint32_t fragments, const std::vector<ElementRange>& kept_out)
    : ShardMap(elements, std::vector<uint32_t>(regions, shards_per_region), chunk, fragments,
               kept_out) {}

ShardMap::ShardMap(uint64_t elements, const std::vector<uint32_t>& shards_per_region,
                   uint64_t chunk, uint32_t fragments, const std::vector<ElementRange>& kept_out)
    : elements_(elements), chunk_(chunk) {
  GT_REQUIRE(!shards_per_region.empty(), "shard map: regions is 0, need at least one region");
  std::vector<uint32_t> owner;  // of each of a fragment's n shards
  for (uint32_t r = 0; r < shards_per_region.size(); ++r) {
    GT_REQUIRE(shards_per_region[r] > 0 && shards_per_region[r] <= 1024,
               "shard map: shards_per_region is {}, must be in [1, 1024]", shards_per_region[r]);
    owner.insert(owner.end(), shards_per_region[r], r);
  }
  GT_REQUIRE(chunk > 0, "shard map: chunk is 0, must be positive");
  const uint64_t n = owner.size();
  // Boundary i is the chunk boundary nearest to i/n of the fragment, in whole chunks: sizes
  // differ by at most one chunk (plus the shorter last chunk).
  const auto frags = fragment_ranges(elements, fragments, chunk);
  fragment_count_ = static_cast<uint32_t>(frags.size());
  const auto holes =
      fragments > 1 ? intersect_ranges({0, elements}, kept_out) : std::vector<ElementRange>{};
  if (!holes.empty()) {
    for (size_t i = 1; i < holes.size(); ++i)
      GT_REQUIRE(holes[i - 1].end() <= holes[i].offset,
                 "shard map: the kept-out ranges are not sorted and disjoint");
    // Each fragment's pieces, then the kept-out fragment's, cut into n parts each.
    auto add = [&](uint32_t f, const std::vector<ElementRange>& pieces, uint64_t empty_at) {
      const auto parts = cut_pieces(pieces, n, chunk);
      for (uint64_t i = 0; i < n; ++i) {
        const uint32_t region = owner[i];
        if (parts[i].empty())
          shards_.push_back({static_cast<uint32_t>(shards_.size()), empty_at, 0, region, f});
        for (const auto& r : parts[i]) {
          shards_.push_back({static_cast<uint32_t>(shards_.size()), r.offset, r.count, region, f});
          empty_at = r.end();
        }
      }
    };
    // Fragments 0..P-1 are P parts of about equal size of what is left, in layer order.
    const auto streamed = cut_pieces(subtract_ranges({0, elements}, holes), fragments, chunk);
    uint64_t empty_at = 0;
    for (uint32_t f = 0; f < fragments; ++f) {
      add(f, streamed[f], empty_at);
      if (!streamed[f].empty()) empty_at = streamed[f].back().end();
    }
    add(fragment_count_, holes, holes.front().offset);
    ++fragment_count_;
    return;
  }
  for (uint32_t f = 0; f < frags.size(); ++f) {
    const uint64_t first_chunk = frags[f].offset / chunk;
    const uint64_t chunks = (frags[f].end() + chunk - 1) / chunk - first_chunk;
    // An empty fragment (the table has fewer chunks than fragments) gets empty shards at its
    // offset, as the surplus shards of a small table do without fragments.
    const auto parts = frags[f].count == 0
                           ? std::vector<ElementRange>(n, ElementRange{frags[f].offset, 0})
                           : split_chunks(first_chunk, chunks, n, chunk, frags[f].end());
    for (uint64_t i = 0; i < n; ++i)
      shards_.push_back(
          {static_cast<uint32_t>(shards_.size()), parts[i].offset, parts[i].count, owner[i], f});
  }
}

std::vector<ShardRange> ShardMap::owned_by(uint32_t region) const {
  std::vector<ShardRange> out;
  for (const auto& s : shards_)
    if (s.region == region) out.push_back(s);
  return out;
}

}  // namespace geotrain::server
