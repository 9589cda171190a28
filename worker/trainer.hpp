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
// language models).
//
// Owns everything it builds. run() blocks until the last round (or until `stop` is requested,
// which ends it after the current round). Metrics go to
// <run_dir>/worker-<region>-<rank>.metrics.jsonl.
#pragma once

#include <zmq.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "worker/config.hpp"

namespace geotrain::worker {

struct TrainResult {
  uint64_t rounds = 0;
  uint64_t steps = 0;
  uint64_t skipped_steps = 0;
  std::optional<double> final_test_accuracy;  // leaders of classifiers
  std::optional<double> final_val_bpb;        // leaders of language models
  std::optional<double> final_val_loss;
  std::vector<float> params;  // final parameters (every rank)
  double wall_seconds = 0;
};

class Trainer {
 public:
  Trainer(WorkerConfig config, std::string region, uint32_t rank, zmq::context_t& context);
  TrainResult run(std::stop_token stop = {});

 private:
  WorkerConfig config_;
  std::string region_;
  uint32_t region_index_;
  uint32_t rank_;
  zmq::context_t& context_;
};

// Path of a worker's metrics file in the run folder.
std::filesystem::path worker_metrics_path(const std::filesystem::path& run_dir,
                                          const std::string& region, uint32_t rank);

}  // namespace geotrain::worker
