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
  bool operator==(const ElementRange&) const = default;
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

// `range` without the elements of `holes` (sorted, disjoint): the pieces left, in order.
inline std::vector<ElementRange> subtract_ranges(ElementRange range,
                                                 const std::vector<ElementRange>& holes) {
  std::vector<ElementRange> out;
  uint64_t at = range.offset;
  for (const auto& h : holes) {
    if (h.end() <= at || h.count == 0) continue;
    if (h.offset >= range.end()) break;
    if (h.offset > at) out.push_back({at, h.offset - at});
    at = std::max(at, h.end());
  }
  if (at < range.end()) out.push_back({at, range.end() - at});
  return out;
}

// `ranges` (sorted, disjoint) clipped to `range`: the pieces inside it, in order.
inline std::vector<ElementRange> intersect_ranges(ElementRange range,
                                                  const std::vector<ElementRange>& ranges) {
  std::vector<ElementRange> out;
  for (const auto& r : ranges) {
    const uint64_t lo = std::max(range.offset, r.offset), hi = std::min(range.end(), r.end());
    if (lo < hi) out.push_back({lo, hi - lo});
  }
  return out;
}

// Cuts the elements of `pieces` (sorted, disjoint), taken in order as one sequence, into n parts
// of about equal size, each boundary on a multiple of `chunk` of that sequence; a part that spans
// a gap between pieces is one range per piece. Returns, per part, its ranges (empty for an empty
// part).
inline std::vector<std::vector<ElementRange>> cut_pieces(const std::vector<ElementRange>& pieces,
                                                         uint64_t n, uint64_t chunk) {
  uint64_t total = 0;
  for (const auto& p : pieces) total += p.count;
  // The parts as ranges of the sequence [0, total), then mapped back onto the pieces.
  const auto parts = split_chunks(0, (total + chunk - 1) / chunk, n, chunk, total);
  std::vector<std::vector<ElementRange>> out(n);
  size_t piece = 0;
  uint64_t piece_start = 0;  // the piece's first element in the sequence
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t at = parts[i].offset;
    const uint64_t end = parts[i].end();
    while (at < end) {
      while (piece_start + pieces[piece].count <= at) piece_start += pieces[piece++].count;
      const uint64_t take = std::min(end, piece_start + pieces[piece].count) - at;
      out[i].push_back({pieces[piece].offset + (at - piece_start), take});
      at += take;
    }
  }
  return out;
}

// The index of the fragment that holds element `offset` (fragments from fragment_ranges).
inline uint32_t fragment_of(const std::vector<ElementRange>& fragments, uint64_t offset) {
  for (size_t p = 0; p < fragments.size(); ++p)
    if (offset < fragments[p].end()) return static_cast<uint32_t>(p);
  return fragments.empty() ? 0 : static_cast<uint32_t>(fragments.size() - 1);
}

}  // namespace geotrain
