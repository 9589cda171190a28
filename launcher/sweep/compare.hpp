// `geotrain compare RUN_A RUN_B ...`: existing run folders side by side, with no sweep needed.
//
// Reads each folder's summary.json (and config.yaml, for the settings that differ between the
// runs) and writes one table: final test accuracy (classifiers) or final validation bits per
// byte and loss (language models), time to target, wall time, WAN bytes, and against the first
// run (the baseline) the accuracy or bpb delta, the WAN reduction and the speedup, as in a
// sweep's results (docs/experiments.md). The table goes to stdout as markdown and, with the
// plot of accuracy or validation bpb against time and against WAN bytes
// (scripts/plot_compare.py), into an output folder: compare.md, compare.csv, compare.png.
//
// Bad input is an InputError naming the folder: not a directory, not a run folder (none of
// summary.json, config.yaml, worker metrics), no summary.json (the run has not finished), a
// summary that is not JSON, or classifiers mixed with language models.
// Functions read and write files and (run_compare) start the plot script; no shared state.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace geotrain::launcher {

struct ComparedRun {
  std::filesystem::path dir;
  std::string label;  // the folder's name (with its parent's when two names are equal)
  nlohmann::json summary;
  std::map<std::string, std::string> settings;  // dotted config key -> value, from config.yaml
};

struct Comparison {
  std::vector<ComparedRun> runs;  // in the order given; runs[0] is the baseline
  bool language_model = false;
  std::vector<std::string> differing_keys;  // config keys whose values differ between the runs
};

// Loads and checks the folders (InputError naming the first bad one).
Comparison load_comparison(const std::vector<std::filesystem::path>& run_dirs);

// The table, as markdown (at most 8 differing keys as columns; all of them in the CSV).
std::string comparison_markdown(const Comparison& c);
std::string comparison_csv(const Comparison& c);

struct CompareOptions {
  std::vector<std::filesystem::path> runs;
  std::filesystem::path out_dir;      // created when missing
  std::filesystem::path plot_script;  // scripts/plot_compare.py; empty = no plot
  std::string python = "/usr/bin/python3";
  std::FILE* table = stdout;  // the markdown table
  std::FILE* log = stderr;    // where the files went
};

// Writes compare.md, compare.csv and (with a plot script) compare.png into out_dir and prints
// the table. Returns 0; InputError on bad input; a failed plot is a warning, not an error.
int run_compare(const CompareOptions& options);

}  // namespace geotrain::launcher
