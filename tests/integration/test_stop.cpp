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
