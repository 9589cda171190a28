// RegionWorkers: the fleet's shape, how many worker processes each region runs
// (worker.workers_per_region: one count for every region, or {region: count} naming each region
// for an uneven fleet, docs/config.md). Global ranks number the workers region by region in the
// config's order: region i's rank k is the sum of the counts before it, plus k, which is how a
// cluster launcher's rank maps to a worker (cli/launch_env.hpp) and how the data is sharded.
//
// Plain value; read once by read_region_workers (every process's parser calls it).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/yaml_reader.hpp"

namespace geotrain {

class RegionWorkers {
 public:
  RegionWorkers() = default;  // one worker per region of `regions` (none yet)
  // `counts` parallel to `regions`, each >= 1.
  RegionWorkers(std::vector<std::string> regions, std::vector<uint32_t> counts);
  // Every region of `regions` with `count` workers.
  static RegionWorkers uniform(std::vector<std::string> regions, uint32_t count);

  // The region's count (InputError naming the regions for an unknown one).
  uint32_t in(std::string_view region) const;
  // All regions' workers.
  uint32_t total() const;
  // The global rank of the region's rank 0.
  uint32_t first_rank(std::string_view region) const;
  // The region and rank of global rank `rank` (InputError beyond total()).
  std::pair<std::string, uint32_t> place(uint32_t rank) const;
  // The largest count, and whether the counts differ.
  uint32_t largest() const;
  bool uneven() const;
  // As the config says it: "2", or "{us-east: 4, eu-west: 2}" when uneven.
  std::string text() const;

 private:
  size_t index(std::string_view region) const;

  std::vector<std::string> regions_;
  std::vector<uint32_t> counts_;
};

// worker.workers_per_region from a config's root: a count for every region (default 1), or a
// mapping naming every region of `regions` with its count; each 1 to `most`. InputError naming
// the key on a bad value, an unknown region or a region left out.
RegionWorkers read_region_workers(const YamlReader& in, const YAML::Node& root,
                                  const std::vector<std::string>& regions, uint32_t most);

}  // namespace geotrain
