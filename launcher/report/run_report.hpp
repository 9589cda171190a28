// report.md and the one-line outcome of a run, rendered from its summary (run_summary.hpp) and
// its config.yaml: the settings as the processes used them (the first leader's `start` event
// fills in what the config left to defaults), the results, the codec phases and the plots that
// exist in the folder. Functions read files; no shared state.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace geotrain::launcher {

// report.md: settings (from config.yaml) and results (from the summary), with the plots that
// exist in the folder.
std::string build_report(const std::filesystem::path& run_dir, const nlohmann::json& summary);

// The one line `geotrain run` prints at the end: run name, status, wall time, the final
// metric (test accuracy, or validation bits per byte for a language model), WAN bytes, and
// whether the target was reached.
std::string outcome_line(const std::string& run_name, const nlohmann::json& summary);

}  // namespace geotrain::launcher
