// RunSettings: the launcher's own settings, read from the config's top-level `run:` section,
// plus what the launcher needs from the rest of the config (region names, workers per region).
//
//   run:
//     name: demo                      # run folder suffix (default: the config file's stem)
//     out_dir: runs                   # parent of run folders (relative to the working dir)
//     wan_profile: wan/global-3.yaml  # a file (relative to the config file, then to the
//                                     # project's configs/) or a name (global-3: wan/NAME.yaml
//                                     # there, core/wan_profile.hpp); required with > 1
//                                     # region; must cover every pair (`--wan` replaces it)
//     target_accuracy: 0.85           # classifiers: enables time_to_target_seconds in summary.json
//     target_val_bpb: 2.5             # language models, instead: validation bits per byte (lower
//                                     # is better); at most one of the two targets
//     base_port: 0                    # first loopback port; 0 = ephemeral ports from the kernel
//     startup_timeout_s: 30           # servers and netsim must accept connections by then
//     timeout_s: 0                    # whole run; 0 = no limit
//     progress_interval_s: 2          # progress refresh (TTY) or log line period (not a TTY)
//     plots: true                     # run scripts/plot_run.py at the end
//     netsim_stats_interval_s: 1      # netsim.jsonl period
//     restart: {max_restarts: 3, backoff_s: 1}  # restart a server, netsim or worker group
//                                     # that dies, up to max_restarts times each, backoff_s
//                                     # after its death; 0 = off: a death fails the run
//                                     # (docs/run.md)
//
// Unknown keys are errors naming the key and the allowed ones (InputError); so are values out
// of range. Plain struct; parsing only reads text.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/region_workers.hpp"
#include "launcher/report/run_target.hpp"

namespace geotrain::launcher {

// run.restart: what the launcher does when a server, netsim or worker dies before the workers are
// done. On by default, so that a run as shipped survives kill -9 of any one process.
struct RestartPolicy {
  uint32_t max_restarts = 3;  // per process (per region for workers); 0: a death fails the run
  double backoff_s = 1;       // from the death to the new process's start, when the backoff applies
  // A process that had run this long when it died is started again at once: the backoff is for
  // one that dies soon after its start (a crash loop, a port still taken), not for a healthy
  // process that one fault took down.
  double healthy_after_s = 30;
  bool enabled() const { return max_restarts > 0; }
};

struct RunSettings {
  std::string name;
  std::filesystem::path out_dir = "runs";
  std::optional<std::filesystem::path> wan_profile;  // the profile file, absolute
  std::optional<double> target_accuracy;             // at most one of these two
  std::optional<double> target_val_bpb;
  uint16_t base_port = 0;
  double startup_timeout_s = 30;
  double timeout_s = 0;
  double progress_interval_s = 2;
  bool plots = true;
  double netsim_stats_interval_s = 1;
  RestartPolicy restart;

  // From the rest of the config.
  std::vector<std::string> regions;
  RegionWorkers workers;  // worker.workers_per_region
  // worker.external: the workers are the user's own processes (Python leaders, docs/python.md);
  // the launcher starts servers and netsim only and waits for every region's leader's `done`.
  bool external_workers = false;
  // worker.elastic on the CPU: a dead worker of these regions is restarted alone and rejoins its
  // region's live group (--rejoin); in the others its region's workers restart from snapshots.
  std::vector<std::string> elastic_regions;
  bool elastic(const std::string& region) const {
    return std::find(elastic_regions.begin(), elastic_regions.end(), region) !=
           elastic_regions.end();
  }

  RunTarget target() const { return {target_accuracy, target_val_bpb}; }
};

// `source` names the config in messages; `config_dir` and `project_configs` (the project's
// configs/ folder; empty: none) are where run.wan_profile is looked for (wan_profile_search());
// `default_name` is used when run.name is absent.
RunSettings parse_run_settings(std::string_view yaml_text, std::string_view source,
                               const std::filesystem::path& config_dir,
                               std::string_view default_name,
                               const std::filesystem::path& project_configs = {});
RunSettings load_run_settings(const std::filesystem::path& config_file);

// Reads a whole file; InputError naming the file when it is a directory, does not exist or
// cannot be read.
std::string read_text_file(const std::filesystem::path& file);

}  // namespace geotrain::launcher
