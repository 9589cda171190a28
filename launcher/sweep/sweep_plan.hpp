// SweepPlan: a `geotrain sweep` file expanded into the runs it stands for, and the results
// table built from their summaries.
//
//   name: seeds-table                # sweep folder name (default: the file's stem)
//   base: ../demo.yaml               # the config every point starts from (relative to this file)
//   out_dir: runs/sweeps             # parent of the sweep folder (default: runs/sweeps)
//   set: {worker.rounds: 320}        # dotted keys every point sets (not varied: no label part)
//   grid:                            # cartesian product over dotted config keys, in this order
//     worker.critical_codec: [fp32, onebit]
//     server.staleness_bound: [0, 2]
//   points:                          # and/or explicit points (run after the grid's)
//     - {label: fp32-sync, set: {worker.critical_codec: fp32, server.staleness_bound: 0}}
//   baseline: fp32-sync              # the label deltas are against (default: the first point)
//
// The key `wan` (in grid or points) switches a point's WAN profile by name or path, like
// `geotrain run --wan`: `wan: [global-3, lan]` sets run.wan_profile to the profile file (a path
// relative to the sweep file, then to `project_configs`, else NAME.yaml in the base's wan/
// folder, the sweep's ../wan/, or `project_configs`/wan; core/wan_profile.hpp). A point's
// run.wan_profile is found the same way; the base's, as `geotrain run` finds it. When a sweep has a
// point on a profile named `lan` and a point with the same config on another profile, results
// report `wan_over_lan` for the latter (wan_over_lan()). A point's config is the base, then the
// sweep's `set` (`wan` there too), then `overrides` (`geotrain sweep --set`), then the point's own
// keys: --set changes what `set` says, a point's key what either says; a key that the grid or the
// points vary cannot be overridden.
//
// A point's label is given, or made from its values ("critical_codec=fp32,staleness_bound=0").
// Each point's config is the base with the point's keys set; run.name becomes the label and a
// run.wan_profile is made absolute (a value set by the sweep is relative to the sweep file).
// Strict: unknown keys, a key written twice, an empty sweep, duplicate labels, an unknown
// baseline or a WAN profile that is not found are InputErrors naming them. Pure functions apart
// from reading files.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config_overrides.hpp"

namespace geotrain::launcher {

struct SweepPoint {
  std::string label;
  std::vector<std::pair<std::string, std::string>> values;  // dotted key -> YAML scalar/flow text
  std::string config_yaml;                                  // the point's full config
  std::string wan_profile;  // the `name` of the point's WAN profile; empty with one region
  std::string setup;        // the config without run.name and run.wan_profile: equal setups
                            // differ only in their WAN (how wan_over_lan pairs points)
};

// The most points a sweep may have (grid and points together). Points run one after another,
// each a whole deployment: 1,024 runs of a minute are 17 hours, and a larger study is better
// split into sweeps (each resumable). Beyond, a typo in a grid would run for ever.
inline constexpr size_t kMaxSweepPoints = 1024;

struct SweepPlan {
  std::string name;
  std::filesystem::path out_dir = "runs/sweeps";
  std::vector<std::string> keys;  // every key any point sets, in first-seen order
  std::vector<SweepPoint> points;
  std::size_t baseline = 0;  // index into points
};

SweepPlan parse_sweep(const std::string& yaml_text, const std::string& source,
                      const std::filesystem::path& sweep_dir, const std::string& default_name,
                      const std::vector<ConfigOverride>& overrides = {},
                      const std::filesystem::path& project_configs = {});
SweepPlan load_sweep(const std::filesystem::path& file,
                     const std::vector<ConfigOverride>& overrides = {},
                     const std::filesystem::path& project_configs = {});

// One row per point: its label and values, and its summary (null when the run did not finish).
struct SweepRow {
  const SweepPoint* point;
  nlohmann::json summary;
  std::filesystem::path run_dir;
};

// results.csv and results.md: final accuracy and its delta against the baseline (percentage
// points), time to target, wall time, WAN bytes and their reduction against the baseline, and
// speedup (baseline time / this time, on time to target when both reached it, else wall time);
// for language models the final validation bits per byte and its delta against the baseline
// (last CSV columns, so older readers keep theirs; results.md shows them instead of accuracy),
// then the WAN profile's name and wan_over_lan (after those, for the same reason).
std::string results_csv(const SweepPlan& plan, const std::vector<SweepRow>& rows);
std::string results_markdown(const SweepPlan& plan, const std::vector<SweepRow>& rows);

// Per row: its time over the time of the same setup (SweepPoint::setup) on the profile named
// `lan`, on time to target when both reached it, else on wall time; 1 on the LAN row itself;
// empty when the sweep has no such pair for the row or a run did not finish.
std::vector<std::optional<double>> wan_over_lan(const std::vector<SweepRow>& rows);

}  // namespace geotrain::launcher
