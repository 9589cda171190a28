#include "worker/data/sampler.hpp"

#include <numeric>

#include "core/error.hpp"
#include "core/splitmix64.hpp"

namespace geotrain::worker {
namespace {

// Uniform in [0, bound) by rejection, so no modulo bias.
uint64_t uniform_below(uint64_t& state, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t r;
  do r = splitmix64(state);
  while (r >= limit);
  return r % bound;
}

}  // namespace

std::vector<uint64_t> shuffled_indices(uint64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<uint64_t> idx(n);
  std::iota(idx.begin(), idx.end(), uint64_t{0});
  uint64_t state = seed ^ (epoch * 0xd1b54a32d192ed03ull);
  for (uint64_t i = n; i > 1; --i) std::swap(idx[i - 1], idx[uniform_below(state, i)]);
  return idx;
}

DistributedSampler::DistributedSampler(const SamplerOptions& options) : options_(options) {
  GT_REQUIRE(options.world > 0, "sampler: world size is 0");
  GT_REQUIRE(options.rank < options.world, "sampler: rank {} is not below world size {}",
             options.rank, options.world);
  GT_REQUIRE(options.dataset_size >= options.world,
             "sampler: {} samples cannot be shared by {} workers", options.dataset_size,
             options.world);
  per_rank_ = options.drop_last ? options.dataset_size / options.world
                                : (options.dataset_size + options.world - 1) / options.world;
}

std::vector<uint64_t> DistributedSampler::indices(uint64_t epoch) const {
  const uint64_t n = options_.dataset_size;
  std::vector<uint64_t> order;
  if (options_.shuffle) {
    order = shuffled_indices(n, options_.seed, epoch);
  } else {
    order.resize(n);
    std::iota(order.begin(), order.end(), uint64_t{0});
  }
  const uint64_t total = per_rank_ * options_.world;
  // Pad by wrapping around (total - n < world <= n, so one pass suffices) or truncate.
  for (uint64_t i = 0; order.size() < total; ++i) order.push_back(order[i]);
  order.resize(total);
  std::vector<uint64_t> mine;
  mine.reserve(per_rank_);
  for (uint64_t i = options_.rank; i < total; i += options_.world) mine.push_back(order[i]);
  return mine;
}

}  // namespace geotrain::worker
