// TrainResult: what a worker's run returns (Trainer::run, worker/run/trainer.hpp), filled in at the
// end of a run (worker/run/final_model.hpp). A plain struct.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace geotrain::worker {

struct TrainResult {
  uint64_t rounds = 0;
  uint64_t steps = 0;
  uint64_t skipped_steps = 0;
  // Leaders: the global model's figures (docs/training.md, "The end of a run"), or the region's
  // own without one (global_model false); region_*: always the region's own parameters'.
  std::optional<double> final_test_accuracy;  // classifiers
  std::optional<double> final_val_bpb;        // language models
  std::optional<double> final_val_loss;
  std::optional<double> region_test_accuracy;
  std::optional<double> region_val_bpb;
  std::optional<double> region_val_loss;
  bool global_model = false;
  std::vector<float> params;  // final parameters, every rank: the global model when there is one
  double wall_seconds = 0;
};

}  // namespace geotrain::worker
