#include "worker/training/zero_shards.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace geotrain::worker {

uint64_t ZeroShards::begin(uint32_t rank) const {
  if (counts.size() == 1) return 0;  // not sharded: every worker's range is everything
  GT_REQUIRE(rank < counts.size(), "zero shards: rank {} of {}", rank, counts.size());
  uint64_t at = 0;
  for (uint32_t r = 0; r < rank; ++r) at += counts[r];
  return at;
}

ZeroShards zero_shards(uint64_t parameters, uint32_t ranks, uint32_t stage,
                       const std::vector<MatrixBlock>& matrices) {
  GT_REQUIRE(stage <= 2, "worker.zero_stage {} is not 0, 1 or 2", stage);
  GT_REQUIRE(ranks >= 1, "zero shards over no workers");
  ZeroShards z;
  z.stage = stage;
  if (stage == 0 || ranks == 1) {
    z.counts = {parameters};
    return z;
  }
  uint64_t at = 0;
  for (uint32_t r = 0; r < ranks; ++r) {
    uint64_t end = r + 1 == ranks ? parameters : (parameters * (r + 1)) / ranks;
    for (const MatrixBlock& m : matrices) {
      const uint64_t m_end = m.offset + m.rows * m.cols;
      if (end > m.offset && end < m_end) end = end - m.offset <= m_end - end ? m.offset : m_end;
    }
    end = std::max(end, at);  // a matrix wider than a range: this one may be empty
    z.counts.push_back(end - at);
    at = end;
  }
  return z;
}

}  // namespace geotrain::worker
