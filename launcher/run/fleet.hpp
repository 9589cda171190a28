#pragma once
// The child processes of one `geotrain run`: started into one process group, restarted with the
// same arguments (and so the same ports), stopped workers first on destruction. Every start goes
// to the run's FaultLog (events.jsonl). Not thread-safe: the launcher's loop owns it.
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/report/fault_log.hpp"
#include "launcher/report/jsonl_tail.hpp"
#include "launcher/run/child_process.hpp"
#include "launcher/run/deployment.hpp"

namespace geotrain::launcher {

using Clock = std::chrono::steady_clock;

inline Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One process of the run, and where its restart (run.restart) stands.
struct Running {
  ProcessSpec spec;
  ChildProcess child;
  std::filesystem::path log;
  // run.restart: a server or netsim that died is brought back in phases: backoff (dead, waiting
  // run.restart.backoff_s), starting (until its ports accept connections), resuming (until
  // every region has finished a round since), running.
  enum class Phase { running, backoff, starting, resuming } phase = Phase::running;
  uint32_t restarts = 0;
  Clock::time_point started = Clock::now();  // its newest start
  Clock::time_point phase_until{};           // end of the backoff, or the startup deadline
  size_t fault = 0;                          // its newest fault in the FaultLog
  // A server's own round when it died (server_round); fewest rounds any region had finished
  // when it died for the others.
  uint64_t rounds_at_death = 0;
  std::map<std::string, uint64_t> rounds_at_up{};  // each region's finished rounds once it was up
  std::optional<JsonlTail> metrics{};              // a server's metrics, read from its restart on
};

class Fleet {
 public:
  Fleet(std::string binary, std::filesystem::path run_dir, double grace_s)
      : binary_(std::move(binary)), run_dir_(std::move(run_dir)), grace_s_(grace_s) {}
  ~Fleet() { stop_all(); }
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;

  // Starts a process; its output goes to <run>/<name>.log.
  Running& start(const ProcessSpec& spec);
  // Starts a process that died again, with the same arguments plus `extra`; its log goes on in
  // the same file.
  void restart(Running& p, const std::vector<std::string>& extra = {});
  // Every start goes to events.jsonl, with times since t0.
  void record(FaultLog* events, Clock::time_point t0) {
    events_ = events;
    t0_ = t0;
  }
  std::vector<std::unique_ptr<Running>>& procs() { return procs_; }

  // SIGTERM to the still-running processes of one role (all roles when none is given), then
  // wait up to the grace period, then SIGKILL.
  void stop(std::optional<ProcessRole> role);
  void stop_all() {
    stop(ProcessRole::worker);
    stop(std::nullopt);
  }
  // Stops every still-running worker of `region` now (SIGKILL: their state is in their
  // snapshots) and reaps it.
  void kill_region_workers(const std::string& region);

 private:
  std::string binary_;
  std::filesystem::path run_dir_;
  double grace_s_;
  pid_t group_ = 0;
  FaultLog* events_ = nullptr;
  Clock::time_point t0_;
  std::vector<std::unique_ptr<Running>> procs_;
};

// "<name> failed (<status>); last lines of <log>: ...": why the run failed with this death.
std::string failure_message(const Running& p, int status);

}  // namespace geotrain::launcher
