// ServerMetrics: counters of one server process, and their JSONL log in the run folder.
//
// Per region: pushes, pulls, bytes in and out, errors replied, time waited at the staleness
// gate, and a staleness histogram (buckets 0..s, one per tau). Per shard: rounds released.
// Events (rounds released, membership changes, checkpoints) and periodic snapshots are appended
// as one JSON object per line to <run_dir>/server-<region>.metrics.jsonl; snapshot() is also
// what a StatsRequest returns. Not thread-safe: the server loop owns it. Writes block briefly.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace geotrain::server {

struct RegionCounters {
  uint64_t pushes = 0, pulls = 0, bytes_in = 0, bytes_out = 0, errors = 0;
  uint64_t gate_waits = 0, gate_wait_us = 0;
  uint64_t rounds_sat_out = 0;      // rounds its pushes skipped (wire::Push::skip)
  std::vector<uint64_t> staleness;  // histogram, index = tau
};

class ServerMetrics {
 public:
  ServerMetrics(std::vector<std::string> regions, uint32_t staleness_bound,
                std::optional<std::filesystem::path> jsonl);

  RegionCounters& region(size_t r) { return regions_.at(r); }
  void record_staleness(size_t r, uint32_t tau);
  // `late`: of the contributors, deltas of rounds released before (quorum policy).
  void round_released(uint32_t shard, uint64_t round, size_t contributors, size_t late = 0);
  // Appends {"t": seconds since start, "event": name, ...fields}.
  void event(const std::string& name, nlohmann::json fields = nlohmann::json::object());
  nlohmann::json snapshot() const;
  uint64_t applied_rounds() const { return applied_rounds_; }

 private:
  std::vector<std::string> names_;
  std::vector<RegionCounters> regions_;
  uint64_t applied_rounds_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::ofstream out_;
};

}  // namespace geotrain::server
