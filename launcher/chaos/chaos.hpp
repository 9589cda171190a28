// run_chaos(): `geotrain chaos` (docs/chaos.md). Runs one config twice under run.restart, each
// run for a fixed measurement window: a fault-free reference (or takes one: `--reference
// RUN_DIR`), then the same config while faults are injected at seeded random times:
//   kill       SIGKILL of a random process of a kind the launcher restarts (kRestartableKinds);
//   stop       SIGSTOP of a random server, SIGCONT `stop_s` later;
//   partition  one random directed link cut for `partition_s` (netsim's fault schedule, written
//              into the run's config before it starts, counted from the run's start even if
//              netsim itself is killed and restarted).
// One fault at a time: a kill or stop waits until the previous fault has recovered (every region
// finished a round since) and no partition is under way. Every injected fault goes to the run's
// events.jsonl (`inject`, and `fault` / `recovered` for stops and partitions, next to the
// launcher's own `fault` / `restarted` / `recovered` of the kills), so summary.json and report.md
// list them. Goodput = the chaos run's useful rounds per second over the reference's, both
// measured from the moment every region finished its first round to the end of the window
// (useful rounds: the fewest rounds any region has finished). At the end it checks that no
// process of either run is left (by scanning /proc for their run folder in the command line).
//
// Layout: <out>/<time>-chaos-<name>/{reference,chaos}/<run folder>, and chaos.json there with
// the result (the keys of ChaosResult::report, stable). Each run's processes' memory is sampled
// (RssSampler: `memory` in chaos.json). With `verify`, the chaos run finishes its rounds and its
// global model is checked (`verify` in chaos.json). Blocks for both runs; call it from the
// main thread (the launcher's children's PR_SET_PDEATHSIG follows it). `stop` (the user's
// SIGINT/SIGTERM) ends the current run early and skips the rest.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "launcher/chaos/chaos_plan.hpp"
#include "launcher/run/launcher.hpp"

namespace geotrain::launcher {

struct ChaosOptions {
  // config, overrides, binary, validate, progress, plots: as for `geotrain run` (run.out_dir is
  // replaced by the chaos folder's subfolders).
  LaunchOptions run;
  std::optional<std::filesystem::path> out_dir;    // parent of the chaos folder (run.out_dir)
  double duration_s = 600;                         // the chaos run's measurement window
  double kill_every_s = 20;                        // mean time between two faults
  std::optional<double> reference_duration_s;      // default: duration_s
  std::optional<std::filesystem::path> reference;  // an existing run folder instead
  uint64_t seed = 1;
  double stop_s = 10;       // SIGSTOP length
  double partition_s = 10;  // partition length
  FaultMix mix;
  std::vector<std::string> kill_kinds;  // default: every kind in kRestartableKinds
  std::optional<double> first_fault_s;  // default: max(kill_every_s, 15) after the start
  std::optional<double> min_goodput;    // fail (exit 1) below this
  // --verify: the chaos run gets the rounds the reference does in the window (its rate x the
  // window), is not stopped at the window's end but finishes them without further faults, and
  // must end with every copy of the global model identical (summary.json's
  // global_model_identical); partitions planned past the window are dropped.
  bool verify = false;
};

struct ChaosResult {
  int exit_code = 0;  // 0 ok, 1 a run failed / a process was left / goodput below the floor,
                      // 130 interrupted
  std::filesystem::path dir;
  nlohmann::json report;  // chaos.json
};

ChaosResult run_chaos(const ChaosOptions& options, std::stop_token stop);

// The report as the few lines `geotrain chaos` prints without --json.
std::string describe_chaos(const nlohmann::json& report);

}  // namespace geotrain::launcher
