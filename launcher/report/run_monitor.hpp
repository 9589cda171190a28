// RunMonitor: folds the workers' metrics events (docs/run-folder.md, "Worker metrics") into
// per-region and per-worker state: what the progress display shows and what summary.json
// is computed from. Events of unknown kinds are ignored; missing fields count as absent.
// Classifiers evaluate test_accuracy/test_loss; language models val_bpb/val_loss/val_accuracy
// (the `start` event's `model` says which); both are kept as they come.
//
// `time` in worker events is seconds since that worker started; workers of a run start within
// a fraction of a second of each other, so times are compared across workers as they are.
// Plain state, no I/O; not thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "launcher/report/run_target.hpp"

namespace geotrain::launcher {

struct WorkerState {
  uint64_t steps = 0;                 // step events (the `done` count when there is one)
  double compute_s = 0;               // sum of step compute_s
  double comm_s = 0;                  // sum of step comm_s
  std::optional<double> optimizer_s;  // sum of step optimizer_s (none: no step event has it)
  double last_time = 0;               // newest event time
  std::optional<double> wall_s;       // from `done`
  bool done = false;
};

struct RegionState {
  uint64_t round = 0;              // newest round number the leader reported (round or step event)
  uint64_t step = 0;               // leader's newest step
  std::optional<double> loss;      // leader's newest step loss
  std::optional<double> accuracy;  // newest eval test_accuracy
  std::optional<double> val_bpb;   // newest eval val_bpb (language models)
  std::optional<double> val_loss;  // newest eval val_loss, nats per byte
  // The leader's `done`: final_* are the global model's (docs/training.md, "The end of a run"),
  // set only when it had one; region_* its region's own parameters' (from final_* in folders of
  // builds before the global model, whose `done` has no global_model).
  std::optional<double> final_accuracy;
  std::optional<double> final_val_bpb;
  std::optional<double> final_val_loss;
  std::optional<double> region_accuracy;
  std::optional<double> region_val_bpb;
  std::optional<double> region_val_loss;
  std::optional<bool> global_model;           // the `done`'s global_model, when it says
  uint64_t rounds_done = 0;                   // training rounds (steps > 0), each round once
  std::set<uint64_t> rounds_seen;             // their numbers (a restarted region may redo one)
  double bytes_pushed = 0, bytes_pulled = 0;  // rounds and the flush
  // The round events' bytes (pushed, pulled) by the round of their exchange (no flush).
  std::map<uint64_t, std::pair<double, double>> bytes_by_round;
  double flush_bytes = 0;      // the `flush` event's, pushed + pulled
  uint64_t skipped_steps = 0;  // leader's steps the anomaly guard refused
  // worker.step_time_ms: whether the region's hardware is emulated (its start events say a step
  // time), and its workers' steps that overran it (the emulation holds while there are none).
  bool emulated = false;
  uint64_t step_overruns = 0;
  // What one of its steps trains on (the leader's `start`: samples, or a GPT's tokens); 0 from
  // folders written before it was logged.
  double tokens_per_step = 0;
  std::optional<double> staleness;  // newest
  double staleness_sum = 0;         // over round events with a staleness
  uint64_t staleness_n = 0;
  double wait_s = 0;       // sum of round wait_s
  double leader_time = 0;  // newest leader event time
  // When the target was met: the first evaluation that met it, interpolated linearly from the
  // one before (the crossing between two evaluations), on the clock add() was given.
  std::optional<double> time_to_target;
  std::optional<std::pair<double, double>> last_eval;  // (time, target metric) of the newest eval
  std::optional<double> rounds_planned;                // from the leader's `start`

  double wan_bytes() const { return bytes_pushed + bytes_pulled; }
  double rounds_per_s() const {
    return leader_time > 0 ? static_cast<double>(rounds_done) / leader_time : 0;
  }
};

class RunMonitor {
 public:
  RunMonitor() = default;
  explicit RunMonitor(std::optional<double> target_accuracy)
      : RunMonitor(RunTarget{target_accuracy, std::nullopt}) {}
  explicit RunMonitor(RunTarget target);

  // One metrics line of a worker. `clock_offset` is added to its `time` for the time to target
  // only: the launcher's time of that worker process's start, so that the time to target is
  // the run's wall time (read_run_metrics() reads it from events.jsonl); 0: the worker's clock.
  void add(const nlohmann::json& event, double clock_offset = 0);

  const std::map<std::string, RegionState>& regions() const { return regions_; }
  const std::map<std::pair<std::string, uint32_t>, WorkerState>& workers() const {
    return workers_;
  }
  // The first leader `start` event seen (run settings as the workers understood them).
  const nlohmann::json& start_event() const { return start_; }
  // The `model` of the first start event that names one ("gpt", "mlp"); empty when unknown.
  const std::string& model() const { return model_; }
  // A language-model run: the workers said "gpt", or a region reported val_bpb.
  bool language_model() const;
  std::optional<double> target_accuracy() const { return target_.accuracy; }
  const RunTarget& target() const { return target_; }

 private:
  RunTarget target_;
  std::string model_;
  std::map<std::string, RegionState> regions_;
  std::map<std::pair<std::string, uint32_t>, WorkerState> workers_;
  nlohmann::json start_;
};

}  // namespace geotrain::launcher
