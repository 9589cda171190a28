// The end of a run: summary.json and report.md, computed from the run folder's files alone
// (worker-*.metrics.jsonl, netsim.jsonl, config.yaml), so that a folder of a run that failed
// or was interrupted gets them too, and so that they can be rebuilt later.
//
// summary.json fields (docs/run.md): status, model ("gpt"/"mlp", from the workers' start
// events, when they name it), final_test_accuracy (classifiers: the global model's accuracy as
// the leaders evaluated it, docs/training.md "The end of a run"; without a global model the mean
// over regions of the leaders' accuracy of their own parameters, else their newest eval; null for
// a language model), final_val_bpb and final_val_loss (language models: the same over validation
// bits per byte and loss in nats per byte; null for a classifier), global_model (whether final_*
// are the global model's), model_file ("model.safetensors" when the run folder has it),
// wall_seconds, wan_bytes_total (payload bytes pushed + pulled by all leaders, to every server,
// the flush at the end included: with R regions, (R-1)/R of it crosses the WAN),
// wan_wire_bytes_total (bytes netsim carried, both directions, framing
// included, when netsim.jsonl exists), rounds (most rounds any region finished), steps
// (most local steps any worker took), compute_utilization (forward+backward time over wall
// time, summed over workers), optimizer_utilization (the optimizer's step time over the same
// wall time; null when the steps do not report it), mean_staleness (over all round events),
// target_accuracy or target_val_bpb with time_to_target_seconds (when a target is set: the time by
// which every region's leader had evaluated at or above the accuracy, or at or below the bpb; null
// if one never did), and per_region details (region_* of each region's own parameters, final_* of
// the global model as its leader evaluated it, flush_bytes), and codec_phases (the rounds cut where
// a codec schedule switches, each span with first_round, last_round (null: to the end), its
// critical, non-critical and downlink codecs, rounds, bytes_pushed, bytes_pulled and wan_bytes of
// the round exchanges in it; the flush is in no span, so the spans' wan_bytes plus the regions'
// flush_bytes are wan_bytes_total).
// Functions read and write files; they do not block otherwise. No shared state.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "launcher/report/run_monitor.hpp"

namespace geotrain::launcher {

struct SummaryInputs {
  std::optional<double> target_accuracy;  // at most one of these two (RunTarget)
  std::optional<double> target_val_bpb;
  std::optional<double> wall_seconds;  // the launcher's clock; else the slowest worker's wall_s
  std::string status = "completed";    // completed | failed | interrupted | timed out
  std::string failure;                 // why, when not completed

  RunTarget target() const { return {target_accuracy, target_val_bpb}; }
};

// Folds every worker-*.metrics.jsonl of the folder into a monitor.
RunMonitor read_run_metrics(const std::filesystem::path& run_dir, const RunTarget& target);
RunMonitor read_run_metrics(const std::filesystem::path& run_dir,
                            std::optional<double> target_accuracy);

// A finished run's summary.json, for the readers of run folders (compare, a sweep's results):
// nullopt when it is missing or not a JSON object. A null value reads as an absent key at any
// depth (a summary edited by hand or written by another tool may hold them: "not measured").
std::optional<nlohmann::json> read_summary(const std::filesystem::path& run_dir);

// Whether a summary is of a language-model run (model "gpt", or a final_val_bpb).
bool is_language_model(const nlohmann::json& summary);

nlohmann::json build_summary(const std::filesystem::path& run_dir, const SummaryInputs& inputs);

// Builds the summary and the report (run_report.hpp) and writes summary.json and report.md;
// returns the summary.
nlohmann::json write_summary_and_report(const std::filesystem::path& run_dir,
                                        const SummaryInputs& inputs);

// "1.23 MB", "456 kB", ...
std::string human_bytes(double bytes);

// server.optimizer as the report shows it when the config leaves it out: the servers' default
// (server/outer_optimizer.hpp, OuterOptimizerConfig; a test holds the two together).
inline constexpr const char* kDefaultOuterOptimizerText =
    "{lr: 1.0, momentum: 0.0, nesterov: false}";

}  // namespace geotrain::launcher
