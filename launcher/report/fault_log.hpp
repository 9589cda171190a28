// FaultLog: what died during a run and how the launcher recovered (run.restart), as the run
// folder's `events.jsonl`; fault_lines() makes the progress display's lines.
//
// events.jsonl holds one JSON object per line, `time` in seconds since the launcher started the
// first process, `event` one of:
//   start      {process, role, pid, restart}   every child started (restart: 0 for the first)
//   fault      {process, role, region, status, action: "restart" | "fail"}
//   restarted  {process, restart, pid, restart_s, restored_round?}   the new process is up
//   recovered  {process, restart, recovery_s, rounds_lost?}   every region finished a round since
// fold_faults() turns those lines back into the summary's `restarts` and `faults`, so the
// summary is still computed from the folder's files alone. Writes and flushes a line per call;
// not thread-safe (the launcher's supervising thread).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace geotrain::launcher {

// One death of a process and what followed.
struct Fault {
  std::string process;  // "server-eu-west", "netsim"
  std::string role;     // "server", "netsim", "worker"
  std::string region;   // servers and workers
  std::string status;   // "killed by SIGKILL", "exit 1"
  double at_s = 0;      // when the launcher saw it die
  bool restarted = false;
  uint32_t restart = 0;                    // the how-manyth restart of this process
  std::optional<double> restart_s;         // death -> the new process accepted connections
  std::optional<double> recovery_s;        // death -> every region finished a round again
  std::optional<uint64_t> restored_round;  // servers: the checkpoint round it restored
  std::optional<uint64_t> rounds_lost;     // servers: released rounds since that checkpoint
  bool waits = false;  // action "wait": a stop or a partition (geotrain chaos), nothing restarted

  nlohmann::json to_json() const;
};

class FaultLog {
 public:
  explicit FaultLog(const std::filesystem::path& file);

  void started(double t, const std::string& process, const std::string& role, int pid,
               uint32_t restart);
  // Returns the fault's index, for restarted() and recovered().
  size_t fault(double t, const std::string& process, const std::string& role,
               const std::string& region, const std::string& status, bool will_restart,
               uint32_t restart);
  void restarted(size_t fault, double t, int pid, std::optional<uint64_t> restored_round);
  void recovered(size_t fault, double t, std::optional<uint64_t> rounds_lost);

  const std::vector<Fault>& faults() const { return faults_; }

 private:
  void write(nlohmann::json event);
  std::ofstream out_;
  std::vector<Fault> faults_;
};

// A fault as one line of text: "server-eu-west killed by SIGKILL at 12.3 s: restarted in 1.4 s
// (checkpoint of round 5), training resumed after 3.0 s".
std::string describe_fault(const Fault& f);

// The faults that events.jsonl lines describe, in the order of their `fault` lines.
std::vector<Fault> fold_fault_list(const std::vector<nlohmann::json>& events);
// The summary's fault fields from events.jsonl lines: {"restarts": N, "faults": [...]}.
nlohmann::json fold_faults(const std::vector<nlohmann::json>& events);

// The progress display's fault lines: `faults` by time, the newest `most` described, after a
// line counting the earlier ones (the run folder's events.jsonl and report keep them all).
std::vector<std::string> fault_lines(std::vector<Fault> faults, size_t most);

}  // namespace geotrain::launcher
