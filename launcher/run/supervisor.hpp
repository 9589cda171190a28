#pragma once
// What `geotrain run` does when one of its processes dies (run.restart), and the record of it.
// A server or netsim is restarted in place, at once when it had run run.restart.healthy_after_s,
// else after run.restart.backoff_s (the same for the workers' restarts below). A worker's death in
// an elastic region (worker.elastic, CPU) while others of it live costs only that worker: it is
// restarted after the backoff with --rejoin (restarted at its `rejoin` event). A non-leader's
// region trains on without it meanwhile (the fault's recovery, at the leader's `regroup` event);
// a leader's waits for it and gives it the region's state (recovered at its `rejoin`); one that
// dies again before it is back in the group falls back to the region's restart. Otherwise
// (a GPU region, or no worker of the region left) the death takes the region's whole Gloo/NCCL
// group down and starts it again from the workers' snapshots (--resume, a new --generation). Each
// death, restart and recovery (with rounds lost) goes to the FaultLog, so the progress display,
// events.jsonl and the report show it. Beyond run.restart.max_restarts, or a restart that never
// comes up, fails the run (failure()). Not thread-safe: the launcher's loop calls it; poll() never
// blocks beyond a reap of killed workers.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <string>

#include "launcher/report/fault_log.hpp"
#include "launcher/report/run_monitor.hpp"
#include "launcher/run/fleet.hpp"
#include "launcher/run/run_settings.hpp"

namespace geotrain::launcher {

class Supervisor {
 public:
  // `monitor` is fed the workers' metrics by the launcher; the Supervisor reads the rounds it has
  // seen (what a death costs). All references outlive the Supervisor.
  Supervisor(const RunSettings& settings, std::filesystem::path run_dir, Fleet& fleet,
             FaultLog& faults, const RunMonitor& monitor, Clock::time_point t0)
      : settings_(settings),
        run_dir_(std::move(run_dir)),
        fleet_(fleet),
        faults_(faults),
        monitor_(monitor),
        t0_(t0) {}

  // Polls every process once: handles new deaths and the restarts that are due. Returns whether
  // any worker is left (running, or down while its region is restarted).
  bool poll();
  // A worker's metrics line: a leader's `resume` ends its region's restart, its next trained
  // round the recovery (with the rounds it trains again).
  void on_worker_event(const nlohmann::json& e);
  // Why the run must stop as failed; empty while it may go on.
  const std::string& failure() const { return failure_; }

 private:
  // run.restart for one region's workers. Phases: backoff (the group is down), resuming (until
  // the leader's `resume` event: the restart is done, and the event names the snapshot round),
  // recovering (until the leader finishes a round after it).
  struct RegionRecovery {
    enum class Phase { running, backoff, resuming, recovering } phase = Phase::running;
    uint32_t restarts = 0;
    Clock::time_point backoff_until{};
    size_t fault = 0;
    uint64_t last_round = 0;       // the newest round the region's leader finished
    uint64_t rounds_at_death = 0;  // last_round when the worker died
    uint64_t resumed_at = 0;       // the round the restarted group trains first
    bool down() const { return phase != Phase::running; }
  };

  // A death into the FaultLog (`fault`), counted against `restarts` (a process's, or a region's):
  // whether it may be restarted (`allowed`, run.restart's budget, no input error); sets failure_
  // when not.
  bool count_restart(const Running& p, int status, uint32_t& restarts, bool allowed, size_t& fault);
  void on_death(Running& p, int status);  // a server or netsim
  void on_worker_death(Running& first_seen, int first_status);
  // An elastic region's worker died while others of it live: it alone is restarted, to rejoin (a
  // leader, to lead them again with their state).
  void on_member_death(Running& p, int status);
  void rejoin_when_due(Running& p);
  // The leader's `regroup` (the region trains on without the members it lost) and a restarted
  // member's `rejoin` (back in the group): the fault's recovery, then its restart.
  void on_regroup(const std::string& region, const nlohmann::json& e);
  void on_rejoin(const std::string& region, uint32_t rank);
  Running* member_restarted_alone(const std::string& region, uint32_t rank);
  // Whether a worker of `dead`'s region other than it is running.
  bool others_alive(const Running& dead);
  // run.restart.backoff_s, or none for a process that had run healthy_after_s when it died.
  double backoff_of(const Running& p) const;
  void restart_region_when_due(RegionRecovery& rr, const std::string& region);
  void supervise(Running& p, std::optional<int> status);  // a server or netsim, every poll
  bool leader_finished(const std::string& region);
  std::string restarts_used_up(const Running& p, int status) const;
  double now_s() const { return seconds_since(t0_); }

  const RunSettings& settings_;
  const std::filesystem::path run_dir_;
  Fleet& fleet_;
  FaultLog& faults_;
  const RunMonitor& monitor_;
  const Clock::time_point t0_;
  std::map<std::string, RegionRecovery> recovery_;
  std::string failure_;
};

}  // namespace geotrain::launcher
