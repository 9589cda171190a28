// Standby shards end to end (issue 50, item 2; docs/server.md "Standby shards"): `geotrain run` on
// 2 regions x 1 worker (a small MLP, synchronous rounds, netsim on the lan profile) with
// server.standby on. A stopped server's shards are served by its standby in the other region's
// server process within takeover_after_ms, so training goes on through the stop (without a standby
// it waits: test_faults); the stopped server, continued, finds it was replaced, exits, and its
// restart takes the shards back. A killed server's restart takes its shards back from the standby
// too. Every copy of the global model is identical at the end.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <signal.h>

#include <chrono>
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
using geotrain::test::pid_of;
using geotrain::test::rounds_done;

constexpr double kTakeoverS = 1.5;

std::string config_text(int rounds) {
  return geotrain::test::two_region_config(
      rounds, "standby", "standby: {codec: onebit, anchor_every: 10, takeover_after_ms: 1500}");
}

// The events of `kind` in a metrics file.
std::vector<json> events(const fs::path& file, const std::string& kind) {
  std::vector<json> out;
  for (auto& e : read_jsonl(file))
    if (e.value("event", "") == kind) out.push_back(std::move(e));
  return out;
}

// Runs the config, applies `fault` to server-eu-west once both regions did 4 rounds, and returns
// the run folder and the summary.
struct Outcome {
  fs::path dir;
  json summary;
};
template <class Fault>
Outcome run_with(const geotrain::test::TempDir& tmp, int rounds, Fault fault) {
  const auto config = tmp.path() / "standby.yaml";
  std::ofstream(config) << config_text(rounds);
  const auto out = tmp.path() / "runs";
  Background run("run " + config.string() + " --out " + out.string());
  const auto dir = geotrain::test::wait_for_rounds(out, 4);
  REQUIRE(dir.has_value());
  const auto pid = pid_of(*dir, "server-eu-west");
  REQUIRE(pid.has_value());
  fault(*pid, *dir);
  const auto& result = run.wait();
  INFO(result.text);
  CHECK(result.code == 0);
  std::ifstream sf(*dir / "summary.json");
  auto s = json::parse(sf);
  INFO(s.dump(2));
  CHECK(s["status"] == "completed");
  CHECK(s["rounds"] == rounds);
  CHECK(s["global_model_identical"] == true);
  CHECK(s["standby_bytes"].get<double>() > 0);
  CHECK(s["final_test_accuracy"].get<double>() > 0.5);
  return {*dir, s};
}

// The newest `restore` event of the restarted server-eu-west: where its shards came from.
std::string restored_from(const fs::path& dir) {
  std::string from = "none";
  for (const auto& e : events(dir / "server-eu-west.metrics.jsonl", "restore"))
    from = e.value("from", std::string("checkpoint"));
  return from;
}

}  // namespace

TEST_CASE("standby: a stopped server's shards are served by its standby, and training goes on") {
  geotrain::test::TempDir tmp("launcher-standby-stop");
  constexpr int kRounds = 60;
  constexpr double kStopS = 6;
  int before = 0, during = 0;
  const auto o = run_with(tmp, kRounds, [&](int pid, const fs::path& dir) {
    REQUIRE(::kill(pid, SIGSTOP) == 0);
    before = rounds_done(dir, "us-east");
    std::this_thread::sleep_for(std::chrono::duration<double>(kStopS));
    during = rounds_done(dir, "us-east");
    REQUIRE(::kill(pid, SIGCONT) == 0);
  });
  MESSAGE("SIGSTOP of server-eu-west for " << kStopS << " s: us-east trained rounds " << before
                                           << " to " << during);
  // The standby in us-east's server process took eu-west's shards over, and both regions
  // trained on meanwhile (a round of 4 x 40 ms; without a standby: at most one, test_faults).
  const auto takeovers = events(o.dir / "standby-eu-west.metrics.jsonl", "takeover");
  REQUIRE(takeovers.size() == 1);
  CHECK(takeovers[0]["primary_silent_ms"].get<double>() >= kTakeoverS * 1000);
  CHECK(during >= before + 5);
  // Continued, the old primary found it was replaced, left, and was restarted: its shards taken
  // back from the standby.
  REQUIRE(o.summary["faults"].size() == 1);
  CHECK(o.summary["faults"][0]["process"] == "server-eu-west");
  CHECK(restored_from(o.dir) == "standby");
  CHECK(events(o.dir / "standby-eu-west.metrics.jsonl", "hand_back").size() == 1);
}

TEST_CASE(
    "standby: a leader restarted while the standby serves greets it there, and the run "
    "completes") {
  geotrain::test::TempDir tmp("launcher-standby-leader");
  constexpr int kRounds = 60;
  const auto o = run_with(tmp, kRounds, [](int pid, const fs::path& dir) {
    REQUIRE(::kill(pid, SIGSTOP) == 0);
    // Once the standby serves (its takeover event), us-east's leader dies and is restarted: it
    // must find eu-west's shards at the standby, the primary being stopped still.
    const auto file = dir / "standby-eu-west.metrics.jsonl";
    for (int i = 0; i < 100 && events(file, "takeover").empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    REQUIRE(events(file, "takeover").size() == 1);
    const auto leader = pid_of(dir, "worker-us-east-0");
    REQUIRE(leader.has_value());
    REQUIRE(::kill(*leader, SIGKILL) == 0);
    // The restarted leader trains rounds while the primary is still stopped.
    const int before = rounds_done(dir, "us-east");
    int after = before;
    for (int i = 0; i < 100 && after < before + 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      after = rounds_done(dir, "us-east");
    }
    CHECK(after >= before + 3);
    REQUIRE(::kill(pid, SIGCONT) == 0);
  });
  CHECK(o.summary["faults"].size() == 2);  // the leader, and the replaced server
}

TEST_CASE("standby: a killed server's restart takes its shards back from the standby") {
  geotrain::test::TempDir tmp("launcher-standby-kill");
  constexpr int kRounds = 40;
  const auto o =
      run_with(tmp, kRounds, [](int pid, const fs::path&) { REQUIRE(::kill(pid, SIGKILL) == 0); });
  REQUIRE(o.summary["faults"].size() == 1);
  CHECK(o.summary["faults"][0]["process"] == "server-eu-west");
  CHECK(restored_from(o.dir) == "standby");
}
