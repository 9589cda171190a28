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

// RegionBatches: worker.batch_size, each worker's micro-batch (samples, or a GPT's windows): one
// size for every region, or {region: size} naming each region (a region of larger accelerators
// trains on more per step). Every worker's micro-batch j together is the fleet's global
// micro-batch j; a worker's part of it starts at offset(rank), region by region in the ranks'
// order (RegionWorkers), so the workers' samples are disjoint for any sizes.
//
// Plain value; read once by read_region_batches (the worker config's parser).
class RegionBatches {
 public:
  RegionBatches(uint32_t size = 64);  // NOLINT(google-explicit-constructor): every region's
  // `sizes` parallel to `regions`, each >= 1.
  RegionBatches(std::vector<std::string> regions, std::vector<uint32_t> sizes);

  // The region's size (InputError naming the regions for an unknown one, when per region).
  uint32_t in(std::string_view region) const;
  // Global rank `rank`'s size (the uniform size without asking `workers`).
  uint32_t of_rank(const RegionWorkers& workers, uint32_t rank) const;
  bool uneven() const;
  // As the config says it: "64", or "{us-east: 16, ap-southeast: 4}" when uneven.
  std::string text() const;
  // The global micro-batch of the fleet `workers`: every worker's size, summed.
  uint64_t global(const RegionWorkers& workers) const;
  // Where global rank `rank`'s micro-batch starts within it.
  uint64_t offset(const RegionWorkers& workers, uint32_t rank) const;

 private:
  uint32_t uniform_ = 64;
  std::vector<std::string> regions_;  // empty: uniform_ for every region
  std::vector<uint32_t> sizes_;
};

// "{us-east: 4, eu-west: 2}": a value per region as a config writes it (`values` parallel to
// `regions`).
std::string region_values_text(const std::vector<std::string>& regions,
                               const std::vector<uint32_t>& values);

// A count per region from <section>.<key> (`node`: the section, e.g. the config's `worker`; may
// be absent): one number for every region (`fallback` when the key is absent), or a mapping
// naming every region of `regions`; each in [lo, hi]; parallel to `regions`. InputError naming
// the key on a bad value, an unknown region or a region left out.
std::vector<uint32_t> read_region_counts(const YamlReader& in, const YAML::Node& node,
                                         const std::string& section, const std::string& key,
                                         const std::vector<std::string>& regions, uint32_t fallback,
                                         uint32_t lo, uint32_t hi);

// worker.batch_size (default 64, each 1 to 2^20): uniform unless given per region.
RegionBatches read_region_batches(const YamlReader& in, const YAML::Node& root,
                                  const std::vector<std::string>& regions);

// worker.workers_per_region from a config's root: a count for every region (default 1), or a
// mapping naming every region of `regions` with its count; each 1 to `most`. InputError naming
// the key on a bad value, an unknown region or a region left out.
RegionWorkers read_region_workers(const YamlReader& in, const YAML::Node& root,
                                  const std::vector<std::string>& regions, uint32_t most);

// RegionDevices: worker.device, where each region's workers train: `cpu` (the default) or `cuda`
// for every region, or {region: device} naming each region (a mixed fleet: GPU regions beside
// CPU ones, each region's workers alike). Plain value; read once by read_region_devices.
class RegionDevices {
 public:
  RegionDevices(std::string device = "cpu");  // NOLINT(google-explicit-constructor): every region's
  // `devices` parallel to `regions`.
  RegionDevices(std::vector<std::string> regions, std::vector<std::string> devices);

  // The region's device (InputError naming the regions for an unknown one, when per region).
  const std::string& in(std::string_view region) const;
  // Whether some region trains on `device`.
  bool any(std::string_view device) const;
  bool uneven() const { return !regions_.empty(); }
  // As the config says it: "cuda", or "{us-east: cuda, eu-west: cpu}" when mixed.
  std::string text() const;

 private:
  std::string uniform_ = "cpu";
  std::vector<std::string> regions_;  // empty: uniform_ for every region
  std::vector<std::string> devices_;
};

// worker.device (default cpu; each cpu or cuda): uniform unless given per region. InputError
// naming the key on another value, an unknown region or a region left out.
RegionDevices read_region_devices(const YamlReader& in, const YAML::Node& root,
                                  const std::vector<std::string>& regions);

// Whether a region's workers re-form their group without a dead member (worker.elastic, default
// true) rather than restart it from snapshots: only CPU regions can (Gloo; worker.device cpu,
// the default). The workers read it so; the launcher restarts a dead worker of such a region
// alone (--rejoin). Validation of the two keys is the worker config's.
inline bool regions_re_form(bool elastic, std::string_view device) {
  return elastic && device == "cpu";
}
// The regions of `regions` whose groups re-form (regions_re_form of worker.elastic and each
// region's device).
std::vector<std::string> read_elastic_regions(const YamlReader& in, const YAML::Node& root,
                                              const std::vector<std::string>& regions);

}  // namespace geotrain
