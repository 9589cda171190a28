// Partitions and SIGSTOP end to end (issue 13, section 2): `geotrain run` on 2 regions x 1
// worker (a small MLP, synchronous rounds, netsim on the lan profile) while one link is
// partitioned, or one server is stopped, for longer than server.dead_after_ms (6 s here). The run
// must complete with no process exiting early and no restart; rounds wait during the fault and
// resume. Partition: the cut-off server declares the region dead (it cannot tell a partition from a
// death) and the region rejoins when the link heals; the other server, which still hears it,
// never does. SIGSTOP: nobody is declared dead at all (docs/server.md, "Partitions and stopped
// servers"). CI runs a 10 s partition and a 9 s stop; the 60 s partition and 30 s stop are
// recorded in docs/benchmarks.md.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "launcher/report/jsonl_tail.hpp"
#include "tests/launcher/run_in_background.hpp"
#include "tests/temp_dir.hpp"

namespace fs = std::filesystem;
using geotrain::launcher::read_jsonl;
using nlohmann::json;

namespace {

using geotrain::test::Background;
using geotrain::test::Finished;
using geotrain::test::pid_of;
using geotrain::test::rounds_done;
using geotrain::test::run_folder;

// The longest wait_s of a leader's rounds: how long its exchange was held up.
double longest_wait(const fs::path& run, const std::string& region) {
  double w = 0;
  for (const auto& e : read_jsonl(run / ("worker-" + region + "-0.metrics.jsonl")))
    if (e.value("event", "") == "round") w = std::max(w, e.value("wait_s", 0.0));
  return w;
}

// When the launcher started `process` first (seconds since its start, from events.jsonl).
double started_at(const fs::path& run, const std::string& process) {
  for (const auto& e : read_jsonl(run / "events.jsonl"))
    if (e.value("event", "") == "start" && e.value("process", "") == process)
      return e.value("time", 0.0);
  return 0;
}

// Membership changes a server logged before `until` (seconds on the launcher's clock): "eu-west
// dead", "us-east rejoined", ... A region that finished its rounds and exited is declared dead
// dead_after later: those deaths are real, and come after `until`.
std::vector<std::string> membership(const fs::path& run, const std::string& server_region,
                                    double until = 1e9) {
  std::vector<std::string> out;
  const double start = started_at(run, "server-" + server_region);
  for (const auto& e : read_jsonl(run / ("server-" + server_region + ".metrics.jsonl")))
    if (e.value("event", "") == "membership" && start + e.value("t", 0.0) < until)
      out.push_back(e.value("region", "") + " " + e.value("change", ""));
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// A region is declared dead after kDeadAfterS without a word (6 s, heartbeats every 0.5 s): the
// faults below last well past it, and it is short enough that they need not last 15 s.
constexpr double kDeadAfterS = 6;

std::string config_text(int rounds, const std::string& netsim) {
  return geotrain::test::two_region_config(rounds, "faults", "", netsim);
}

// The run completed on its own: no process died, nothing restarted.
json check_completed(const Finished& result, const fs::path& dir, int rounds) {
  INFO(result.text);
  CHECK(result.code == 0);
  std::ifstream sf(dir / "summary.json");
  auto s = json::parse(sf);
  INFO(s.dump(2));
  CHECK(s["status"] == "completed");
  CHECK(s["rounds"] == rounds);
  CHECK(s["restarts"] == 0);
  CHECK(s["faults"].empty());
  for (const auto& e : read_jsonl(dir / "events.jsonl")) CHECK(e.value("event", "") == "start");
  return s;
}

}  // namespace

TEST_CASE(
    "a partition of one link longer than dead_after: synchronous rounds wait, the cut-off server "
    "drops the region and takes it back when the link heals, and no process exits") {
  geotrain::test::TempDir tmp("launcher-faults-partition");
  const auto config = tmp.path() / "partition.yaml";
  // 10 s from 13 s: past dead_after (6 s) so that the cut-off server declares us-east dead;
  // netsim's clock starts with the run, about 7 s before the first round on a loaded machine.
  // 110 rounds: the run must still be going at 13 s on an idle machine too, where a round takes
  // little more than its 4 x 40 ms of steps (at most ~82 rounds by then), and go on after the heal.
  constexpr double kAt = 13, kUntil = 23;
  constexpr int kPartitionRounds = 110;
  std::ofstream(config) << config_text(
      kPartitionRounds,
      "netsim:\n  links:\n    - {from: us-east, to: eu-west, faults: [{kind: partition, at_s: 13, "
      "until_s: 23}]}\n");
  const auto out = tmp.path() / "runs";
  Background run("run " + config.string() + " --out " + out.string());
  const auto& result = run.wait();
  const auto dir = run_folder(out);
  REQUIRE(dir.has_value());
  const auto s = check_completed(result, *dir, kPartitionRounds);
  // Rounds waited through the partition: the exchange of some round of each region was held up
  // for most of its 10 s (eu-west waits at us-east's server for us-east's next push).
  const double us = longest_wait(*dir, "us-east"), eu = longest_wait(*dir, "eu-west");
  MESSAGE("partition: longest round waits us-east " << us << " s, eu-west " << eu << " s, wall "
                                                    << s["wall_seconds"] << " s");
  CHECK(us > 0.53 * (kUntil - kAt));
  CHECK(eu > 0.53 * (kUntil - kAt));
  // Until dead_after after the heal (netsim's clock starts with netsim): the end of the run can
  // bring real deaths, of regions that finished their rounds while us-east did its last one (its
  // rounds at eu-west's server are one ahead after the rejoin; docs/server.md).
  const double healed = started_at(*dir, "netsim") + kUntil + kDeadAfterS;
  // eu-west's server cannot hear us-east for 10 s: dead after 6 s, back after the heal.
  const auto at_eu = membership(*dir, "eu-west", healed);
  INFO("server-eu-west membership: " << json(at_eu).dump());
  CHECK(contains(at_eu, "us-east dead"));
  CHECK(contains(at_eu, "us-east rejoined"));
  CHECK_FALSE(contains(at_eu, "eu-west dead"));
  // us-east's server hears both regions all along (the leaders heartbeat every server they are
  // not waiting on): nobody dead there.
  const auto at_us = membership(*dir, "us-east", healed);
  INFO("server-us-east membership: " << json(at_us).dump());
  CHECK_FALSE(contains(at_us, "us-east dead"));
  CHECK_FALSE(contains(at_us, "eu-west dead"));
  CHECK(s["final_test_accuracy"].get<double>() > 0.5);
}

TEST_CASE(
    "a server stopped with SIGSTOP for longer than dead_after is a straggler, not a corpse: the "
    "others wait, and nobody is declared dead when it comes back") {
  geotrain::test::TempDir tmp("launcher-faults-sigstop");
  const auto config = tmp.path() / "sigstop.yaml";
  constexpr int kSigstopRounds = 40;  // 4 before the stop, 36 after: enough for accuracy > 0.5
  std::ofstream(config) << config_text(kSigstopRounds, "");
  const auto out = tmp.path() / "runs";
  constexpr double kStopS = 9;  // past dead_after (6 s)
  Background run("run " + config.string() + " --out " + out.string());
  const auto dir = geotrain::test::wait_for_rounds(out, 4);
  REQUIRE(dir.has_value());
  const auto pid = pid_of(*dir, "server-eu-west");
  REQUIRE(pid.has_value());
  REQUIRE(::kill(*pid, SIGSTOP) == 0);
  const int before = rounds_done(*dir, "us-east");
  std::this_thread::sleep_for(std::chrono::duration<double>(kStopS));
  const int during = rounds_done(*dir, "us-east");
  REQUIRE(::kill(*pid, SIGCONT) == 0);
  // Synchronous rounds wait for the stopped server: at most the round in flight finished.
  CHECK(during <= before + 1);
  MESSAGE("SIGSTOP of server-eu-west for " << kStopS << " s at round " << before);
  const auto& result = run.wait();
  const auto s = check_completed(result, *dir, kSigstopRounds);
  for (const auto* region : {"us-east", "eu-west"}) {
    const auto m = membership(*dir, region);
    INFO("server-" << region << " membership: " << json(m).dump());
    CHECK_FALSE(contains(m, "us-east dead"));
    CHECK_FALSE(contains(m, "eu-west dead"));
  }
  // The stopped server noticed that it had not run, and did not hold it against the regions.
  double stall = 0;
  for (const auto& e : read_jsonl(*dir / "server-eu-west.metrics.jsonl"))
    if (e.value("event", "") == "stall") stall = std::max(stall, e.value("seconds", 0.0));
  CHECK(stall > kDeadAfterS);
  const double longest = std::max(longest_wait(*dir, "us-east"), longest_wait(*dir, "eu-west"));
  MESSAGE("SIGSTOP: server stall " << stall << " s, longest round wait " << longest << " s, wall "
                                   << s["wall_seconds"] << " s");
  CHECK(longest > kDeadAfterS);
  CHECK(s["final_test_accuracy"].get<double>() > 0.5);
}
