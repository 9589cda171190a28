// Helpers of the launcher's end-to-end fault tests (test_restart, test_faults, test_recovery):
// `geotrain ARGS` on a thread of its own, and what the run folder's events say about it.
#pragma once

#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "launcher/report/jsonl_tail.hpp"

namespace geotrain::test {

struct Finished {
  int code = -1;
  std::string text;
};

// `geotrain ARGS` (stdout and stderr) on a thread of its own; no doctest macros there.
class Background {
 public:
  explicit Background(std::string args)
      : thread_([this, args = std::move(args)] {
          const std::string command = std::string(GEOTRAIN_BINARY) + " " + args + " 2>&1";
          FILE* pipe = popen(command.c_str(), "r");
          if (!pipe) return;
          std::array<char, 4096> buf;
          for (size_t got; (got = fread(buf.data(), 1, buf.size(), pipe)) > 0;)
            result_.text.append(buf.data(), got);
          const int status = pclose(pipe);
          result_.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        }) {}
  const Finished& wait() {
    if (thread_.joinable()) thread_.join();
    return result_;
  }
  ~Background() { wait(); }

 private:
  Finished result_;
  std::thread thread_;
};

// The one run folder under `out`, once it exists.
inline std::optional<std::filesystem::path> run_folder(const std::filesystem::path& out) {
  if (!std::filesystem::exists(out)) return std::nullopt;
  for (const auto& e : std::filesystem::directory_iterator(out)) return e.path();
  return std::nullopt;
}

// The pid the launcher recorded for `process` in events.jsonl (its newest start).
inline std::optional<int> pid_of(const std::filesystem::path& run, const std::string& process) {
  std::optional<int> pid;
  for (const auto& e : launcher::read_jsonl(run / "events.jsonl"))
    if (e.value("event", "") == "start" && e.value("process", "") == process)
      pid = e.value("pid", 0);
  return pid;
}

// Rounds the leader of `region` has finished so far (its metrics' round events with steps).
inline int rounds_done(const std::filesystem::path& run, const std::string& region) {
  int n = 0;
  for (const auto& e : launcher::read_jsonl(run / ("worker-" + region + "-0.metrics.jsonl")))
    if (e.value("event", "") == "round" && e.value("steps", 0) > 0) ++n;
  return n;
}

// The run folder under `out` once both regions of the two-region runs (us-east, eu-west) have
// finished `rounds` rounds, polled every 100 ms; nullopt when that takes longer than `within`.
inline std::optional<std::filesystem::path> wait_for_rounds(
    const std::filesystem::path& out, int rounds,
    std::chrono::seconds within = std::chrono::seconds(120)) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  std::optional<std::filesystem::path> dir;
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!dir) dir = run_folder(out);
    if (dir && rounds_done(*dir, "us-east") >= rounds && rounds_done(*dir, "eu-west") >= rounds)
      return dir;
  }
  return std::nullopt;
}

#ifdef GEOTRAIN_SOURCE_DIR
// The fault suites' deployment: 2 regions x 1 worker, a small MLP, synchronous rounds, a region
// dead after 6 s of silence (heartbeats every 0.5 s), netsim on the lan profile. `server` goes
// into the server section, `sections` (netsim: ...) before `run`.
inline std::string two_region_config(int rounds, const std::string& name,
                                     const std::string& server = "",
                                     const std::string& sections = "") {
  return "regions: [us-east, eu-west]\n"
         "model: {arch: \"784-32-10\", critical: [\"fc2.*\"]}\n"
         "server: {staleness_bound: 0, dead_after_ms: 6000, heartbeat_ms: 500" +
         (server.empty() ? "" : ",\n         " + server) +
         "}\n"
         "worker: {workers_per_region: 1, batch_size: 32, local_steps: 4, rounds: " +
         std::to_string(rounds) +
         ", lr: 0.1,\n"
         "         critical_codec: fp32, noncritical_codec: int8, eval_every: 0,\n"
         "         step_delay_ms: {us-east: 40, eu-west: 40}}\n"
         "security: {curve: false}\n" +
         sections + "run: {name: " + name +
         ", wan_profile: " GEOTRAIN_SOURCE_DIR
         "/configs/wan/lan.yaml, plots: false, timeout_s: 240}\n";
}
#endif

}  // namespace geotrain::test
