// run_sweep(): `geotrain sweep SWEEP.yaml`. Runs the points of a SweepPlan one after another
// with run_deployment(), and writes results.csv, results.md and comparison plots.
//
// Sweep folder `<out_dir>/<name>/`: `sweep.yaml` (a copy), `configs/<label>.yaml` (each point's
// config), `runs/<label>/<time>-<label>/` (each point's run folder), `results.csv`,
// `results.md`, `sweep_*.png`. Resumable: a point whose runs/<label>/ already holds a run with
// `status: completed` in its summary.json is not run again. The results are rewritten after
// every point, so an interrupted sweep keeps a table of what finished. A failed point is
// recorded and the sweep goes on; a stop request (Ctrl-C) ends the sweep, stopping every point
// that runs. Blocks for the whole sweep; call from the main thread (see launcher.hpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stop_token>
#include <vector>

#include "launcher/run/launcher.hpp"

namespace geotrain::launcher {

struct SweepOptions {
  std::filesystem::path sweep_file;
  std::optional<std::filesystem::path> out_dir;  // overrides the sweep's out_dir
  LaunchOptions run;  // binary, plots, validation, progress; config is set per point
  std::filesystem::path plot_script;  // scripts/plot_sweep.py; empty = no sweep plots
  // `--set`: applied to the base config of every point (run.overrides is not used: the points'
  // configs already hold them). Recorded as a comment at the top of the folder's sweep.yaml.
  std::vector<ConfigOverride> overrides;
  // `--dry-run`: write the folder's sweep.yaml and configs, check every point's config as a run
  // would (run.validate too), list the points with what the folder holds for each; run nothing.
  bool dry_run = false;
  // `--jobs N`: up to N points at once, each on a thread of its own with its progress in
  // runs/<label>/progress.log (1: one after another, the progress shown as `geotrain run` shows
  // it). Points that share a machine share its cores: their wall times are not a quiet run's.
  uint32_t jobs = 1;
};

// 0 when every point completed (a dry run: when every config passed), 1 when one failed, 130
// when interrupted. A point's config that fails its check is an InputError naming its file.
int run_sweep(const SweepOptions& options, std::stop_token stop);

}  // namespace geotrain::launcher
