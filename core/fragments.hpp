// Fragments: the contiguous ranges that streaming synchronisation sends one at a time
// (Streaming DiLoCo's fragments; docs/training.md, "Streaming fragments").
//
// The flat parameter buffer is in layer order, so a contiguous range is a run of layers.
// fragment_ranges() splits it into P ranges of about equal size, every boundary on a multiple of
// the codec chunk (the nearest chunk boundary to p/P of the buffer, as the shard map cuts shards),
// so that a per-chunk scale never straddles two fragments. Servers cut every fragment into their
// shards, so that a shard belongs to exactly one fragment; a leader finds a shard's fragment with
// fragment_of(). A pure function of its arguments: every process derives the same split.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/error.hpp"

namespace geotrain {

struct ElementRange {
  uint64_t offset = 0;
  uint64_t count = 0;
  uint64_t end() const { return offset + count; }
};

// Cuts `chunks` whole chunks [first_chunk, first_chunk + chunks) into n parts of about equal size
// (sizes differ by at most one chunk), clipped to `elements`. The building block of fragments and
// shards.
inline std::vector<ElementRange> split_chunks(uint64_t first_chunk, uint64_t chunks, uint64_t n,
                                              uint64_t chunk, uint64_t elements) {
  std::vector<ElementRange> out;
  const uint64_t begin = std::min(elements, first_chunk * chunk);
  const uint64_t stop = std::min(elements, (first_chunk + chunks) * chunk);
  uint64_t prev = begin;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t end_chunk = first_chunk + (chunks * (i + 1) + n / 2) / n;
    uint64_t end = i + 1 == n ? stop : std::min(stop, end_chunk * chunk);
    end = std::max(end, prev);
    out.push_back({prev, end - prev});
    prev = end;
  }
  return out;
}

// P contiguous fragments of `elements`, chunk-aligned; P = 1 gives the whole buffer.
inline std::vector<ElementRange> fragment_ranges(uint64_t elements, uint32_t fragments,
                                                 uint64_t chunk) {
  GT_REQUIRE(fragments >= 1 && fragments <= 1024, "fragments is {}, must be in [1, 1024]",
             fragments);
  GT_REQUIRE(chunk > 0, "fragments: chunk is 0, must be positive");
  return split_chunks(0, (elements + chunk - 1) / chunk, fragments, chunk, elements);
}

// The index of the fragment that holds element `offset` (fragments from fragment_ranges).
inline uint32_t fragment_of(const std::vector<ElementRange>& fragments, uint64_t offset) {
  for (size_t p = 0; p < fragments.size(); ++p)
    if (offset < fragments[p].end()) return static_cast<uint32_t>(p);
  return fragments.empty() ? 0 : static_cast<uint32_t>(fragments.size() - 1);
}

}  // namespace geotrain
