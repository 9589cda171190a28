// WorkerCheckpointStore: durable snapshots of one worker's own state, so that a worker killed
// mid-run (or a whole run stopped) resumes where it was (docs/run.md, "Recovery").
//
// A snapshot is taken at a round boundary and holds what the servers do not: the parameters
// (the region's global values at that boundary), the local optimizer's state (momentum or
// Adam's moments and step count; Muon's matrices' momentum shares optimizer.m with Adam's first
// moment of the other tensors, so the format is the same for every kind), the anomaly guard's
// loss window, the data position (micro-batches taken: the sampler's epoch and batch and the
// text windows' counter follow from it; every random choice in the data is a counter-based
// function of (seed, position), so the position and the seed are the whole RNG state), the round
// and the schedule's step, and on a region's leader the uplink error-feedback residuals, one per
// stream.
//
// Layout, the server's (server/checkpoint.hpp) in miniature: <dir>/ckpt-<round>/ holds
// state.bin and manifest.json:
//   {"format":1, "kind":"worker", "region", "rank", "round", "steps", "micro_batches", "seed",
//    "identity", "optimizer_steps", "guard_skipped", "guard_losses":[...],
//    "sections":[{"name","count"}], "files":[{"name":"state.bin","bytes","xxh3"}]}
// state.bin is a 16-byte header ("GTWK", format, round) and then each section's fp32 values in
// the manifest's order: params, optimizer.m, optimizer.v, ef.critical.<stream>...,
// ef.noncritical.<stream>.... Written atomically (temp folder, fsync, rename, fsync of the
// parent); the newest `keep` are kept.
//
// Loading verifies everything before returning anything: the manifest's fields and types, the
// identity (a hash of the table layout, world, batch and schedule settings and seed: what the
// state depends on), the file's size and checksum, the header, and that the sections fill the
// file exactly. A snapshot that fails is an InputError naming the file and what is wrong.
// Blocking file I/O; not thread-safe (one owner).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/span.hpp"

namespace geotrain::worker {

struct WorkerConfig;
class LocalStep;

struct WorkerCheckpointState {
  std::string region;
  uint32_t rank = 0;
  uint64_t round = 0;          // the last round finished; training resumes at round + 1
  uint64_t steps = 0;          // local steps done (the learning-rate schedule's position)
  uint64_t micro_batches = 0;  // data position: micro-batches taken
  uint64_t seed = 0;
  uint64_t identity = 0;  // worker_identity() of the config that wrote it
  std::vector<float> params;
  std::vector<float> optimizer_m, optimizer_v;
  uint64_t optimizer_steps = 0;
  std::vector<double> guard_losses;
  uint64_t guard_skipped = 0;
  // Leaders: uplink error-feedback residuals, "critical.<stream>" / "noncritical.<stream>".
  std::map<std::string, std::vector<float>> residuals;
};

class WorkerCheckpointStore {
 public:
  // InputError when keep is 0.
  WorkerCheckpointStore(std::filesystem::path dir, uint32_t keep);

  const std::filesystem::path& dir() const { return dir_; }
  // Writes `state` atomically and prunes old snapshots; returns the snapshot's folder.
  std::filesystem::path write(const WorkerCheckpointState& state) const;
  // Reads and verifies one snapshot folder; InputError naming the file and the problem.
  WorkerCheckpointState load(const std::filesystem::path& folder, uint64_t identity) const;
  // The snapshot of `round`; InputError when it is missing or does not verify.
  WorkerCheckpointState load_round(uint64_t round, uint64_t identity) const;
  // The newest snapshot that verifies; `skipped` gets "<reason>" for each refused one.
  std::optional<WorkerCheckpointState> restore_latest(
      uint64_t identity, std::vector<std::string>* skipped = nullptr) const;
  // Snapshot folders, newest first.
  std::vector<std::filesystem::path> list() const;
  std::filesystem::path folder(uint64_t round) const;

 private:
  std::filesystem::path dir_;
  uint32_t keep_;
};

// A worker's snapshot folder: <run_dir>/<dir>/<region>-<rank> (dir relative to the run folder
// unless absolute).
std::filesystem::path worker_checkpoint_dir(const std::filesystem::path& run_dir,
                                            const std::filesystem::path& dir,
                                            const std::string& region, uint32_t rank);

// What a snapshot's state depends on, hashed: the table layout, regions, workers per region,
// batch size, accumulation and local steps, seed, optimizer kind (Muon: and its adamw_tensors)
// and data kind. A snapshot of another identity is refused on load.
uint64_t worker_identity(const WorkerConfig& config, uint64_t layout_hash);

// A worker's state at the end of `round` as a snapshot holds it: `step`'s optimizer step count,
// guard and schedule position, the data position; `residuals`: the leader's uplink residuals
// (empty on other ranks, and on a leader whose exchange runs in the background). The parameters
// and the optimizer's moments are StepEngine::capture's (worker/backend/step_engine.hpp): they may
// be on a device. region, rank, seed and identity are left for the caller.
WorkerCheckpointState capture_worker_state(const LocalStep& step, uint64_t round,
                                           uint64_t micro_batches,
                                           std::map<std::string, std::vector<float>> residuals);
// A snapshot's optimizer and guard state back into `step`, its parameters into `params`
// (InputError naming `folder` when the sizes differ). The schedule position is not restored:
// a resumed worker's is the round the servers say it trains (worker/run/trainer.hpp).
void restore_worker_state(const WorkerCheckpointState& state, const std::filesystem::path& folder,
                          LocalStep& step, FloatSpan params);

}  // namespace geotrain::worker
