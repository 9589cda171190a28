// ZeRO inside a region (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
// Parameter Models", 2020): the local optimizer's state split over the region's k workers, each
// updating its own range of the flat parameters and the others taking it by an allgather.
//   stage 1: the gradient's AllReduce as before (every worker holds the region's sum), each worker
//            steps its range, the parameters are allgathered;
//   stage 2: a reduce-scatter instead (each worker gets the sum of its own range only), the
//            global norm (clipping, the anomaly guard) summed over the ranges, each worker steps
//            its range, the parameters are allgathered: an AllReduce's traffic in all.
// The optimizer's state per worker is its range's: about 1/k of the unsharded state.
//
// ZeroShards is a plain value: the ranges, contiguous in rank order. Each ends where the equal
// split (r + 1) N / k falls, moved to the nearer edge of a Muon matrix that split falls inside
// (Muon orthogonalises a matrix whole, so a matrix is never cut); every other optimizer is
// element-wise, and the ranges are then equal to within one element.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/training/optimizer.hpp"

namespace geotrain::worker {

struct ZeroShards {
  uint32_t stage = 0;            // 0: not sharded (one range: everything)
  std::vector<uint64_t> counts;  // elements per rank, in rank order

  uint32_t ranks() const { return static_cast<uint32_t>(counts.size()); }
  // Rank `rank`'s range (not sharded: everything, whatever the rank).
  uint64_t begin(uint32_t rank) const;
  uint64_t end(uint32_t rank) const {
    return begin(rank) + counts.at(counts.size() == 1 ? 0 : rank);
  }
  bool sharded() const { return stage > 0 && counts.size() > 1; }
};

// The ranges of `parameters` elements over `ranks` workers at `stage` (0, 1 or 2; stage 0 and one
// rank give one range of everything). matrices: Muon's (in offset order), kept whole. InputError
// on a stage above 2 or no ranks.
ZeroShards zero_shards(uint64_t parameters, uint32_t ranks, uint32_t stage,
                       const std::vector<MatrixBlock>& matrices = {});

}  // namespace geotrain::worker
