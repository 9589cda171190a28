// A worker told to stop (SIGTERM) while its server is dead: it does not sit out
// worker.timeout_ms (a minute here), it ends within about a second, leader and non-leader alike.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "cluster.hpp"
#include "process.hpp"
#include "temp_dir.hpp"

using namespace geotrain;
using namespace geotrain::test;
using namespace std::chrono_literals;

namespace {

bool has_round_event(const std::filesystem::path& metrics) {
  std::ifstream f(metrics);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str().find("\"event\":\"round\"") != std::string::npos;
}

}  // namespace

TEST_CASE("workers whose server died stop within a second of SIGTERM, not at worker.timeout_ms") {
  TempDir dir("stop");
  Cluster c;
  c.regions = {"a"};
  c.workers = 2;
  c.worker_yaml = "  batch_size: 16\n  local_steps: 2\n  rounds: 100000\n  eval_every: 0\n";
  const auto config = dir.path() / "config.yaml";
  std::ofstream(config) << config_text(c, dir.path(), {free_port()});  // timeout_ms: 60000
  Process server({"server", "--config", config.string(), "--region", "a"},
                 dir.path() / "server.log");
  Process leader({"worker", "--config", config.string(), "--region", "a", "--rank", "0"},
                 dir.path() / "worker-0.log");
  Process other({"worker", "--config", config.string(), "--region", "a", "--rank", "1"},
                dir.path() / "worker-1.log");
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!has_round_event(dir.path() / "worker-a-0.metrics.jsonl")) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, "no round within 60 s:\n",
                    leader.log());
    std::this_thread::sleep_for(50ms);
  }
  server.signal(SIGKILL);
  REQUIRE(server.wait(10s).has_value());
  std::this_thread::sleep_for(1500ms);  // the leader is waiting for the dead server by now
  REQUIRE_FALSE(leader.wait(0s).has_value());
  const auto t0 = std::chrono::steady_clock::now();
  leader.terminate();
  other.terminate();
  const auto leader_code = leader.wait(20s);
  const auto other_code = other.wait(20s);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("leader's log:\n", leader.log(), "\nother rank's log:\n", other.log());
  REQUIRE(leader_code.has_value());
  REQUIRE(other_code.has_value());
  MESSAGE("both ranks ended ", seconds, " s after SIGTERM");
  // The grace is 0.5 s and waits poll every 0.1 s; 2 s leaves room for a loaded CI machine.
  CHECK(seconds < 2.0);
  CHECK(*leader_code == 0);
  CHECK(*other_code == 0);
  CHECK(leader.log().find("stopped before the end of its round") != std::string::npos);
}

TEST_CASE(
    "a worker waiting in its region's rendezvous for a rank that never comes stops within a "
    "second of SIGTERM") {
  TempDir dir("stop-rendezvous");
  Cluster c;
  c.regions = {"a"};
  c.workers = 2;
  c.worker_yaml = "  batch_size: 16\n  local_steps: 2\n  rounds: 10\n  eval_every: 0\n";
  const auto config = dir.path() / "config.yaml";
  std::ofstream(config) << config_text(c, dir.path(), {free_port()});  // timeout_ms: 60000
  Process server({"server", "--config", config.string(), "--region", "a"},
                 dir.path() / "server.log");
  // Rank 1 only: its rendezvous at the server waits for rank 0's address.
  Process other({"worker", "--config", config.string(), "--region", "a", "--rank", "1"},
                dir.path() / "worker-1.log");
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (other.log().find("meeting the region's other 1 worker(s)") == std::string::npos) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, "no rendezvous within 60 s:\n",
                    other.log());
    std::this_thread::sleep_for(50ms);
  }
  std::this_thread::sleep_for(1s);  // in the wait by now
  REQUIRE_FALSE(other.wait(0s).has_value());
  const auto t0 = std::chrono::steady_clock::now();
  other.terminate();
  const auto code = other.wait(20s);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("the worker's log:\n", other.log());
  REQUIRE(code.has_value());
  MESSAGE("the rank in the rendezvous ended ", seconds, " s after SIGTERM");
  CHECK(seconds < 2.0);
  CHECK(*code == 0);
  CHECK(other.log().find("stopped while waiting for") != std::string::npos);
  server.terminate();
}

TEST_CASE("every process of a real run is gone within 2 s of its launcher's SIGKILL at start-up") {
  TempDir dir("stop-launcher");
  const auto config = dir.path() / "fleet.yaml";
  // Two regions of two workers: killed while the workers meet their region's group.
  std::ofstream(config) << "regions: [us-east, eu-west]\n"
                           "model: {arch: \"784-32-10\"}\n"
                           "worker: {workers_per_region: 2, batch_size: 32, local_steps: 4,\n"
                           "         rounds: 100000, eval_every: 0}\n"
                           "run: {name: fleet, wan_profile: " GEOTRAIN_SOURCE_DIR
                           "/configs/wan/us-eu.yaml}\n";
  const auto runs = dir.path() / "runs";
  Process launcher({"run", config.string(), "--out", runs.string()}, dir.path() / "launcher.log");
  const auto meeting = [&] {
    if (!std::filesystem::exists(runs)) return false;
    for (const auto& e : std::filesystem::recursive_directory_iterator(runs)) {
      if (e.path().extension() != ".log") continue;
      std::ifstream f(e.path());
      const std::string text((std::istreambuf_iterator<char>(f)), {});
      if (text.find("meeting the region's other") != std::string::npos) return true;
    }
    return false;
  };
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!meeting()) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, "no worker started in 60 s:\n",
                    launcher.log());
    std::this_thread::sleep_for(20ms);
  }
  REQUIRE(processes_mentioning(runs.string()) >= 5);  // 2 servers, netsim and a worker at least
  launcher.signal(SIGKILL);
  REQUIRE(launcher.wait(5s).has_value());
  const auto t0 = std::chrono::steady_clock::now();
  int left = processes_mentioning(runs.string());
  while (left > 0 && std::chrono::steady_clock::now() - t0 < 10s) {
    std::this_thread::sleep_for(20ms);
    left = processes_mentioning(runs.string());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("the run's processes were gone ", seconds, " s after the launcher's SIGKILL");
  CHECK(left == 0);
  CHECK(seconds < 2.0);
}
