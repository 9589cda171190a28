#pragma once
// What a run's summary.json says against a baseline run's, and the CSV cells, as `geotrain sweep`
// (results.csv, results.md) and `geotrain compare` tabulate them: one rule for both tables.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace geotrain::launcher {

// A summary key's number; nullopt when the key is missing or not a number (a failed or
// unfinished run).
std::optional<double> summary_number(const nlohmann::json& summary, const char* key);

// Whether a run finished as planned (`status: completed`). A run that failed, timed out or was
// interrupted is listed with what it reached but never ranked: its deltas, WAN reduction and
// speedup against the baseline (or a baseline's against it) are null.
bool completed(const nlohmann::json& summary);
// The status cell of a table: the summary's status, "<status>, not ranked" for a run that did not
// complete, "not run" without a summary.
std::string status_cell(const nlohmann::json& summary);

// One run against the baseline. Every field is a number or null (unknown; the comparisons are
// null unless both runs completed).
struct RunDeltas {
  nlohmann::json accuracy, delta;       // final test accuracy, and minus the baseline's in points
  nlohmann::json bpb, loss, bpb_delta;  // language models: validation bits per byte, loss
  nlohmann::json ttt, wall;             // time to target, wall time (s)
  nlohmann::json wan, wire;             // WAN payload and wire bytes
  nlohmann::json reduction;             // 1 - WAN bytes / the baseline's
  nlohmann::json speedup;               // baseline's time / this one's: time to target, else wall
};
RunDeltas derive_deltas(const nlohmann::json& summary, const nlohmann::json& baseline);

// RFC 4180: a cell with a comma, quote or newline is quoted, quotes doubled.
std::string csv_text(const std::string& s);
// A number as %.6g, a string as csv_text, null as an empty cell.
std::string csv_cell(const nlohmann::json& v);

}  // namespace geotrain::launcher
