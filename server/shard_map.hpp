// ShardMap: splits the flat parameter buffer into contiguous shard ranges, balanced by size and
// with every boundary on a multiple of the codec chunk (so per-chunk scales never straddle two
// shards). With streaming fragments (worker.fragments = P, core/fragments.hpp) the buffer is
// first cut into P fragments and each fragment into regions x shards_per_region shards, so that a
// shard belongs to exactly one fragment and every region's server owns part of every fragment;
// shard f * n + j (n = regions x shards_per_region) belongs to region j / shards_per_region. With
// P = 1 this is the plain split. Regions may own different numbers of shards
// (server.shards_per_region {region: count}: a larger share of the model on the server with the
// best links): n is then their sum, and the j-th shard of a fragment belongs to the region whose
// run of counts, in region order, contains j.
//
// Critical tensors kept out of streaming (worker.stream_critical: false, P > 1): their ranges
// (`kept_out`) form fragment P, which the leaders exchange at every round boundary without delay,
// and fragments 0..P-1 are the rest, cut into P parts of about equal size in layer order. Each
// fragment's elements are then cut as one sequence into n parts of about equal size, and a part
// that spans a gap (a kept-out range between two pieces) becomes one shard per piece, all owned
// by the part's region: a region may own several shards of a fragment, every shard is contiguous
// and either all critical or all not, and an empty part is one empty shard. Shard ids run in
// fragment order. A pure function of (elements, regions, shards_per_region, chunk, fragments,
// kept_out): every process derives the same map from the config.
// Immutable value type; thread-safe to read.
#pragma once

#include <cstdint>
#include <vector>

#include "core/fragments.hpp"

namespace geotrain::server {

struct ShardRange {
  uint32_t id = 0;
  uint64_t offset = 0;  // first element in the flat buffer
  uint64_t count = 0;
  uint32_t region = 0;  // index of the owning region
  uint32_t fragment = 0;
};

class ShardMap {
 public:
  // InputError when there are no regions, a region's count is not in [1, 1024], or chunk is 0.
  // Shards may be empty when the buffer has fewer chunks than shards.
  // `kept_out`: sorted, disjoint ranges for fragment P (used only when fragments > 1).
  // `shards_per_region`: each region's shards of every fragment, in region order.
  ShardMap(uint64_t elements, const std::vector<uint32_t>& shards_per_region, uint64_t chunk,
           uint32_t fragments = 1, const std::vector<ElementRange>& kept_out = {});
  // Every one of `regions` with `shards_per_region` shards.
  ShardMap(uint64_t elements, uint32_t regions, uint32_t shards_per_region, uint64_t chunk,
           uint32_t fragments = 1, const std::vector<ElementRange>& kept_out = {});

  // Fragments in the map: P, or P + 1 with the kept-out fragment.
  uint32_t fragment_count() const { return fragment_count_; }

  const std::vector<ShardRange>& shards() const { return shards_; }
  std::vector<ShardRange> owned_by(uint32_t region) const;
  uint64_t elements() const { return elements_; }
  uint64_t chunk() const { return chunk_; }

 private:
  uint64_t elements_;
  uint64_t chunk_;
  uint32_t fragment_count_ = 1;
  std::vector<ShardRange> shards_;
};

}  // namespace geotrain::server
