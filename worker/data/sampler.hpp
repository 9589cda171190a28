// DistributedSampler: which sample indices one worker visits in one epoch.
//
// Same semantics as PyTorch's torch.utils.data.DistributedSampler: every worker of every
// region (world = all regions' workers, rank = the worker's global rank, numbered region by
// region: core/region_workers.hpp) sees a disjoint, strided slice of one permutation of [0, n) that
// depends only on (seed, epoch), so all workers agree on it without talking. Without drop_last the
// permutation is padded by wrapping around to a multiple of the world size (a few samples are then
// seen twice per epoch, as in PyTorch); with drop_last the tail is dropped and shards are exactly
// disjoint. The shuffle is our own Fisher-Yates over splitmix64 (std::shuffle is
// implementation-defined), so it is reproducible across compilers. Value type; const methods
// are thread-safe; nothing blocks.
#pragma once

#include <cstdint>
#include <vector>

namespace geotrain::worker {

struct SamplerOptions {
  uint64_t dataset_size = 0;
  uint32_t world = 1;  // workers in all regions together
  uint32_t rank = 0;   // global rank in [0, world)
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

// Deterministic permutation of [0, n) for (seed, epoch).
std::vector<uint64_t> shuffled_indices(uint64_t n, uint64_t seed, uint64_t epoch);

class DistributedSampler {
 public:
  // InputError when world is 0, rank >= world, or there are fewer samples than workers.
  explicit DistributedSampler(const SamplerOptions& options);

  // Samples per worker per epoch (equal for every rank).
  uint64_t samples_per_rank() const { return per_rank_; }
  // This rank's indices for `epoch`, in visiting order.
  std::vector<uint64_t> indices(uint64_t epoch) const;

 private:
  SamplerOptions options_;
  uint64_t per_rank_ = 0;
};

}  // namespace geotrain::worker
