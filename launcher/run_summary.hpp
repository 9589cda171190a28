// The end of a run: summary.json and report.md, computed from the run folder's files alone
// (worker-*.metrics.jsonl, netsim.jsonl, config.yaml), so that a folder of a run that failed
// or was interrupted gets them too, and so that they can be rebuilt later.
//
// summary.json fields (docs/run.md): status, final_test_accuracy (mean over regions of the
// leaders' final accuracy, else their newest eval), wall_seconds, wan_bytes_total (payload
// bytes pushed + pulled by all leaders, to every server: with R regions, (R-1)/R of it crosses
// the WAN), wan_wire_bytes_total (bytes netsim carried, both directions, framing included,
// when netsim.jsonl exists), rounds (most rounds any region finished), steps
// (most local steps any worker took), compute_utilization (forward+backward time over wall
// time, summed over workers), mean_staleness (over all round events), time_to_target_seconds
// (when a target is set: the time by which every region's leader had evaluated at or above it;
// null if one never did), and per_region details.
// Functions read and write files; they do not block otherwise. No shared state.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "launcher/run_monitor.hpp"

namespace geotrain::launcher {

struct SummaryInputs {
  std::optional<double> target_accuracy;
  std::optional<double> wall_seconds;  // the launcher's clock; else the slowest worker's wall_s
  std::string status = "completed";    // completed | failed | interrupted | timed out
  std::string failure;                 // why, when not completed
};

// Folds every worker-*.metrics.jsonl of the folder into a monitor.
RunMonitor read_run_metrics(const std::filesystem::path& run_dir,
                            std::optional<double> target_accuracy);

nlohmann::json build_summary(const std::filesystem::path& run_dir, const SummaryInputs& inputs);

// report.md: settings (from config.yaml) and results (from the summary), with the plots that
// exist in the folder.
std::string build_report(const std::filesystem::path& run_dir, const nlohmann::json& summary);

// Builds both and writes summary.json and report.md; returns the summary.
nlohmann::json write_summary_and_report(const std::filesystem::path& run_dir,
                                        const SummaryInputs& inputs);

// "1.23 MB", "456 kB", ...
std::string human_bytes(double bytes);

}  // namespace geotrain::launcher
