// RunObserver: the part of `geotrain chaos` (launcher/chaos/chaos.hpp) that watches one run while
// run_deployment() runs it on the main thread. It tails the run's events.jsonl (which processes
// run, with which pid; the launcher's faults and recoveries) and its leaders' metrics (the
// progress timeline goodput is measured on), stops the run (through `run_stop`) once the window
// has passed since every region finished its first round (or, to let it finish its rounds, only
// ends the faults then), samples its processes' memory (RssSampler), and, given planned faults,
// injects them: SIGKILL and SIGSTOP/SIGCONT by pid, one at a time, and logs the partitions netsim
// carries out on its own schedule. Its lines in events.jsonl carry "by": "chaos".
//
// tick() and finish() are for one thread (the observer thread, then the caller after joining
// it); tick() never blocks beyond reading the run folder's files.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "launcher/chaos/chaos_plan.hpp"

namespace geotrain::launcher {

// What one run's observer saw and did.
struct ObservedRun {
  std::filesystem::path run_dir;
  std::vector<ProgressPoint> timeline;  // seconds since the run's start, on the harness's clock
  std::map<std::string, uint64_t> rounds_trained;  // per region, over the run (TrainedRounds)
  std::optional<double> window_end_s;  // set when the harness stopped the run at its window's end
  nlohmann::json injected = nlohmann::json::array();
  std::map<std::string, uint32_t> count;  // per fault kind
  size_t planned_in_window = 0;
  bool launcher_gave_up = false;  // a process died once too often (the run fails)
  nlohmann::json memory;          // RssSampler::report, over the run
};

class RunObserver {
 public:
  // `out_parent`: the folder the run's folder will appear in; `window_s`: the measurement window;
  // `faults`: the plan (empty for the reference); `kill_kinds`: process_kind()s a kill may hit;
  // `t0`: the run's start on the harness's clock (time 0 of `faults`). `finish_after_window`
  // (--verify): at the window's end the faults end but the run goes on to finish its rounds.
  RunObserver(std::filesystem::path out_parent, std::vector<std::string> regions, double window_s,
              std::vector<PlannedFault> faults, std::vector<std::string> kill_kinds,
              std::chrono::steady_clock::time_point t0, std::stop_source run_stop,
              bool finish_after_window = false);
  ~RunObserver();
  RunObserver(const RunObserver&) = delete;
  RunObserver& operator=(const RunObserver&) = delete;

  // One look at the run; false once there is nothing more to do (the window ended, or
  // `user_stop` was requested: then the run is asked to stop, and a stopped server continued).
  bool tick(const std::stop_token& user_stop);
  // What it saw, once the run is over.
  ObservedRun finish();

 private:
  class State;
  std::unique_ptr<State> state_;
};

}  // namespace geotrain::launcher
