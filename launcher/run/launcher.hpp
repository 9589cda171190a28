// run_deployment(): `geotrain run`. Launches one config's whole deployment on this machine as
// child processes of one binary (servers, netsim, workers), shows live progress, supervises,
// shuts down, and leaves a complete run folder (docs/run.md, docs/run-folder.md).
//
// Order: read settings -> create the run folder -> allocate ports -> write config.yaml and
// netsim.yaml -> start servers and netsim -> wait until their ports accept connections ->
// start workers -> supervise until every worker has exited -> SIGTERM servers and netsim ->
// plots -> summary.json and report.md. A child that fails (non-zero exit, or a server/netsim
// that exits early) fails the run and its log tail is shown, except that under run.restart a
// server or netsim is started again on the same ports (up to max_restarts times each), and a
// region whose worker died has its whole worker group restarted from the workers' snapshots
// (a Gloo/NCCL group cannot lose a member; up to max_restarts times per region); every
// start, death and recovery goes to <run>/events.jsonl (launcher/report/fault_log.hpp). A stop
// request (the caller's SIGINT/SIGTERM) or run.timeout_s ends the run early. In every case the
// children are stopped (SIGTERM, then SIGKILL after a grace period; they also carry
// PR_SET_PDEATHSIG) and whatever metrics exist are summarized. Blocks for the whole run; call it
// from the main thread (PR_SET_PDEATHSIG follows the forking thread). Writes progress to
// `progress`, messages through spdlog.
#pragma once

#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "core/config_overrides.hpp"

namespace geotrain::launcher {

struct LaunchOptions {
  std::filesystem::path config;
  // `--set` / `--wan`, applied to the config's text before anything reads it; the run folder's
  // config.yaml then holds the result (config_overrides.hpp).
  std::vector<ConfigOverride> overrides;
  std::optional<std::filesystem::path> out_dir;  // overrides run.out_dir
  // The project's configs/ folder: run.wan_profile is looked for there after the config's own
  // folder (core/wan_profile.hpp); empty: only there.
  std::filesystem::path project_configs;
  // `--resume RUN_DIR`: continue that stopped run in its own folder, from its config.yaml
  // (`config` is then ignored; `overrides` still apply), with the servers restoring their
  // checkpoints and the workers their snapshots (launcher/run/resume.hpp, docs/run.md). A folder
  // with neither is refused before anything is written to it.
  std::optional<std::filesystem::path> resume;
  std::string binary;                       // the geotrain binary the children run
  std::filesystem::path plot_script;        // scripts/plot_run.py; empty = no plots
  std::string python = "/usr/bin/python3";  // Debian's, with python3-matplotlib
  // Called on the user's config (with the overrides applied; `source` then names them) and
  // again on the resolved one, e.g. with the worker and server parsers: a config error then
  // stops the run before any process starts.
  std::function<void(const std::string& yaml_text, const std::string& source)> validate;
  std::FILE* progress = stderr;
  std::optional<bool> redraw;  // default: `progress` is a terminal
  double grace_s = 10;         // SIGTERM -> SIGKILL
};

struct RunResult {
  int exit_code = 0;  // 0 completed, 1 failed, 124 timed out, 130 interrupted
  std::filesystem::path run_dir;
  std::string status;
};

RunResult run_deployment(const LaunchOptions& options, std::stop_token stop);

}  // namespace geotrain::launcher
