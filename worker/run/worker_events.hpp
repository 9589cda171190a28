// The worker's metrics events (docs/run-folder.md) as both writers build them, the native trainer
// and the Python API (python/geotrain/torch.py, through the binding), named by the schema
// (core/metrics_events.json, the generated events::field constants): the `step`, `round` and
// `eval` events, how a round's exchanges become the `round` event's fields, and the native
// trainer's `start` event. Python adds only the user's own fields (to `step` and `eval`).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "worker/config.hpp"
#include "worker/data/training_data.hpp"
#include "worker/leader/region_sync.hpp"
#include "worker/leader/tensor_motion.hpp"

namespace geotrain::worker {

// What a `step` event says of one local step. The native trainer knows every figure; the Python API
// the loss (when the user gives it) and the step's compute time. Figures left unset are left out.
struct StepFigures {
  uint32_t rank = 0;
  uint64_t round = 0;
  uint64_t step = 0;  // the worker's steps so far, this one included
  std::optional<double> loss, lr, grad_norm;
  double compute_s = 0;  // the step's work (forward, backward; emulated: its emulated time)
  double comm_s = 0;     // the region's AllReduce
  std::optional<double> optimizer_s;
  std::optional<bool> skipped;  // refused by the anomaly guard
  std::optional<bool> overrun;  // its real work overran its emulated time
};
nlohmann::json step_event(const std::string& region, const StepFigures& s);

// A round's times (seconds, summed over its steps), for its `round` event.
struct RoundTimes {
  double compute_s = 0, comm_s = 0, optimizer_s = 0;
  double wait_s = 0;  // the leader's wait for the exchanges at its steps
};
// The leader's `round` event: round `round` of `steps` local steps (0: the exchanges that drain at
// the end of a run, not a round), its times, and its exchanges' fields (exchange_fields, as
// LeaderSession::take_round_fields hands them out).
nlohmann::json round_event(const std::string& region, uint64_t round, uint32_t steps,
                           const RoundTimes& t, const nlohmann::json& exchanges);

// The exchanges merged in one round (one per round without streaming), as the round event's
// fields: bytes and seconds summed, the worst staleness and gate wait, the last exchange's round
// (merged_round) and released round, the largest single exchange (what streaming divides by P),
// deferred and late shards. An empty object when there were none.
nlohmann::json exchange_fields(const std::vector<RoundReport>& reports);

// One exchange's report as the Python API hands it out (RegionSync.step, StreamingSync
// after_step): round, fragment, bytes, seconds, staleness, gate wait, released round, deferred
// and late shards.
nlohmann::json report_fields(const RoundReport& r);

// A successful flush's figures under the `flush` event's names (the native leaders' and the Python
// API's): bytes and seconds of the pushes and final pulls, segments owed, rejoins, and
// shard_hashes ({"<shard id>": "<hash_hex>"}, the global values each shard was pulled with).
nlohmann::json flush_fields(const FlushReport& r);

// The native trainer's `start` event: what this worker runs (its config, the model's kind and
// size, where it sits in the deployment, whether it resumed and which generation it is).
nlohmann::json start_event(const WorkerConfig& c, const std::string& region, uint32_t rank,
                           uint32_t world, const std::string& model, size_t parameters, bool resume,
                           uint64_t generation);

// An `eval` event as the metrics contract names it: test_* for classifiers, val_* for LMs.
// tokens: training tokens of all regions up to this step (samples for a classifier), the x axis
// on which runs of different batch sizes and H compare.
nlohmann::json eval_event(const std::string& region, const Evaluation& e, uint64_t round,
                          uint64_t step, uint64_t tokens_per_step);
// An `eval` event's place (region, round, step) without figures: the Python API adds the user's.
nlohmann::json eval_event(const std::string& region, uint64_t round, uint64_t step);

// The `done` event's counts (the end figures are added by end_figures, step_overruns by the
// native trainer when its steps are emulated).
nlohmann::json done_event(const std::string& region, uint32_t rank, uint64_t rounds, uint64_t steps,
                          uint64_t skipped_steps, double wall_s);

// An evaluation's figures under the `done` event's names: test_accuracy for a classifier, val_bpb
// and val_loss for a language model.
nlohmann::json figures_of(const Evaluation& e);

// The `done` event's end figures, for the native leaders and the Python API alike:
// region_<figure> of the region's own parameters (`own`), final_<figure> of the global model only
// when there is one (`global`), global_model, and global_model_error (`error`) without one.
// Figures are test_accuracy, val_bpb and val_loss (numbers); other names are left out.
nlohmann::json end_figures(const nlohmann::json& own, const std::optional<nlohmann::json>& global,
                           const std::string& error);

// The leaders' `tensor_motion` event, once the exchanges ended: each tensor's name, elements,
// class and relative update per pull (TensorMotion), in the table's order.
nlohmann::json motion_event(const std::string& region, const TensorMotion& motion);

}  // namespace geotrain::worker
