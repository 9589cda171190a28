// Trainer: one worker process's whole job (DESIGN.md, "One round").
//
// Builds the model (models::make_model: the MLP or the GPT; same deterministic initialisation
// in every process, from the config's seed), this worker's data (TrainingData: its shard of
// Fashion-MNIST or its stream of text windows, over every worker of every region), the intra-region
// Communicator (Gloo, rendezvous through the region's server) and, on rank 0 (the region's leader),
// the RegionSync with every region's server. Then, for each round: H local steps (forward/backward,
// AllReduce of the gradient inside the region, local optimizer step), and at the round boundary the
// leader's exchange (blocking, or overlapped and merged one round late) and a broadcast of the new
// parameters to the region's workers. Leaders evaluate on the held-out set every `eval_every`
// rounds and at the end (test accuracy for classifiers; validation loss and bits per byte for
// language models). At the end the leaders flush what error feedback holds and pull the global
// model, which every rank ends with and the first region's leader writes to
// <run_dir>/model.safetensors (worker/run/final_model.hpp).
//
// Owns everything it builds. run() blocks until the last round (or until `stop` is requested,
// which ends it after the current round). Metrics go to
// <run_dir>/worker-<region>-<rank>.metrics.jsonl.
//
// Recovery (docs/run.md, "Recovery"): with worker.checkpoint.every = N, every worker snapshots
// its state every N rounds, at the last round and when stopped (worker/run/worker_checkpoint.hpp).
// A worker started with `resume` takes the newest snapshot round every rank of its region has
// (the ranks agree over the region's collective), and its leader rejoins the servers, which
// say which round the region pushes next (t). The region then trains round t on round t's
// data at round t's schedule step, from the servers' values: when t is the snapshot's round + 1
// nothing was lost and the run goes on exactly as if it had never stopped (the error-feedback
// residuals are restored too); when the servers are further on, the rounds between are lost to
// this region (its residual is dropped: those rounds' pushes carried it); when they are behind,
// the rounds since their checkpoint are trained again. The leader logs a `resume` event with
// the numbers. `generation` keeps each restart's Gloo/NCCL rendezvous keys apart at the
// region's server (a restarted group must not read the dead group's addresses).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "core/param_table.hpp"
#include "models/model.hpp"
#include "wire/context.hpp"
#include "worker/config.hpp"
#include "worker/run/local_step_config.hpp"
#include "worker/run/metrics_log.hpp"
#include "worker/run/train_result.hpp"

namespace geotrain::worker {

struct TrainerOptions {
  bool resume = false;      // continue from this worker's snapshots (none: a fresh start)
  uint32_t generation = 0;  // restarts of the region's worker group so far
  // A restarted worker of an elastic region: it joins the region's live group and takes its
  // state from the leader (worker/run/region_collective.hpp), not from a snapshot.
  bool rejoin = false;
};

class Trainer {
 public:
  Trainer(WorkerConfig config, std::string region, uint32_t rank, wire::Context& context,
          TrainerOptions options = {});
  TrainResult run(std::stop_token stop = {});

 private:
  WorkerConfig config_;
  std::string region_;
  uint32_t region_index_;
  uint32_t rank_;
  wire::Context& context_;
  TrainerOptions options_;
};

}  // namespace geotrain::worker
