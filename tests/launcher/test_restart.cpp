// run.restart end to end with real processes: `geotrain run` on 2 regions x 1 worker (a small
// MLP on Fashion-MNIST, through netsim on the lan profile), a server or netsim killed with
// SIGKILL mid-run, and the launcher restarting it. The run must complete with the restart in
// summary.json (`restarts`, `faults`), events.jsonl and report.md, and a sane final accuracy.
// Each case takes about 15-30 s on 2 loaded cores.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <yaml-cpp/yaml.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "launcher/report/fault_log.hpp"
#include "launcher/report/jsonl_tail.hpp"
#include "launcher/run/deployment.hpp"
#include "launcher/run/port_allocator.hpp"
#include "launcher/run/run_settings.hpp"
#include "tests/launcher/run_in_background.hpp"
#include "tests/temp_dir.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using geotrain::test::Background;
using geotrain::test::Finished;
using geotrain::test::pid_of;
using geotrain::test::rounds_done;

constexpr const char* kRestart = "{max_restarts: 2, backoff_s: 0.5}";

std::string config_text(const std::string& restart = kRestart) {
  return "regions: [us-east, eu-west]\n"
         "model: {arch: \"784-32-10\", critical: [\"fc2.*\"]}\n"
         "server: {staleness_bound: 0, dead_after_ms: 20000}\n"
         "worker: {workers_per_region: 1, batch_size: 32, local_steps: 4, rounds: 24, lr: 0.1,\n"
         "         critical_codec: fp32, noncritical_codec: int8, eval_every: 0,\n"
         "         step_delay_ms: {us-east: 40, eu-west: 40}}\n"
         "security: {curve: false}\n"
         "run: {name: restart, wan_profile: " GEOTRAIN_SOURCE_DIR
         "/configs/wan/lan.yaml, plots: false,\n"
         "      timeout_s: 150, restart: " +
         restart + "}\n";
}

// Runs the config (with `restart` as run.restart), SIGKILLs `victim` once both leaders finished 4
// rounds, and returns the finished run's summary (after checking the run completed).
json run_and_kill(const std::string& name, const std::string& victim,
                  const std::string& restart = kRestart) {
  geotrain::test::TempDir tmp(name);
  const auto config = tmp.path() / "restart.yaml";
  std::ofstream(config) << config_text(restart);
  const auto out = tmp.path() / "runs";
  const auto t0 = std::chrono::steady_clock::now();
  Background run("run " + config.string() + " --out " + out.string());

  const auto dir = geotrain::test::wait_for_rounds(out, 4);
  REQUIRE(dir.has_value());
  const auto pid = pid_of(*dir, victim);
  REQUIRE(pid.has_value());
  REQUIRE(::kill(*pid, SIGKILL) == 0);
  MESSAGE(victim << " killed after "
                 << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                 << " s, at round " << rounds_done(*dir, "us-east"));
  const auto& result = run.wait();
  INFO(result.text);
  CHECK(result.code == 0);
  CHECK(result.text.find("restart(s) after faults") != std::string::npos);
  std::ifstream sf(*dir / "summary.json");
  auto s = json::parse(sf);
  INFO(s.dump(2));
  CHECK(s["status"] == "completed");
  CHECK(s["rounds"] == 24);
  // What died, when, and how long the recovery took.
  CHECK(s["restarts"] == 1);
  REQUIRE(s["faults"].size() == 1);
  const auto& f = s["faults"][0];
  CHECK(f["process"] == victim);
  CHECK(f["status"] == "killed by SIGKILL");
  CHECK(f["restarted"] == true);
  CHECK(f["restart_seconds"].get<double>() > 0);
  CHECK(f["recovery_seconds"].get<double>() >= f["restart_seconds"].get<double>());
  std::ifstream rf(*dir / "report.md");
  const std::string report((std::istreambuf_iterator<char>(rf)), std::istreambuf_iterator<char>());
  CHECK(report.find("## Faults and restarts") != std::string::npos);
  // 96 steps of a small MLP (about 0.7 without a fault): far above chance (0.1) when the
  // exchange went on correctly.
  CHECK(s["final_test_accuracy"].get<double>() > 0.5);
  return s;
}

}  // namespace

TEST_CASE(
    "a server killed with SIGKILL mid-run is restarted from its checkpoint and the run "
    "completes") {
  const auto s = run_and_kill("launcher-restart-server", "server-eu-west");
  const auto& f = s["faults"][0];
  CHECK(f["region"] == "eu-west");
  // checkpoint.every defaults to 1 under run.restart: the newest released round was saved.
  REQUIRE(f["restored_round"].is_number());
  CHECK(f["restored_round"].get<int>() >= 3);
  CHECK(f["rounds_lost"].get<int>() <= 1);
}

TEST_CASE(
    "netsim killed with SIGKILL mid-run is restarted on the same ports and the run "
    "completes") {
  const auto s = run_and_kill("launcher-restart-netsim", "netsim");
  CHECK(s["faults"][0]["role"] == "netsim");
  CHECK(s["wan_wire_bytes_total"].get<double>() > 0);
}

TEST_CASE(
    "a server that ran healthy_after_s before it died is restarted at once, without the backoff") {
  // A backoff far longer than the whole recovery would take: the restart must skip it.
  const auto s = run_and_kill("launcher-restart-healthy", "server-us-east",
                              "{max_restarts: 2, backoff_s: 30, healthy_after_s: 0}");
  const auto& f = s["faults"][0];
  CHECK(f["restart_seconds"].get<double>() < 10);
}

TEST_CASE("the launcher restarts a dead worker alone in the regions that re-form, per device") {
  using geotrain::launcher::parse_run_settings;
  const std::string regions = "regions: [a, b]\nrun: {wan_profile: lan}\n";
  const std::string configs = GEOTRAIN_SOURCE_DIR "/configs";
  const auto cpu = parse_run_settings(regions, "t.yaml", configs, "t");
  CHECK(cpu.elastic("a"));
  CHECK(cpu.elastic("b"));
  const auto mixed =
      parse_run_settings(regions + "worker: {device: {a: cpu, b: cuda}}\n", "t.yaml", configs, "t");
  CHECK(mixed.elastic("a"));
  CHECK_FALSE(mixed.elastic("b"));  // an NCCL group restarts from its snapshots
  const auto off = parse_run_settings(
      regions + "worker: {device: {a: cpu, b: cuda}, elastic: false}\n", "t.yaml", configs, "t");
  CHECK_FALSE(off.elastic("a"));
  CHECK_FALSE(off.elastic("b"));
}

TEST_CASE("run.restart is read strictly, is on by default, and turns server checkpoints on") {
  using geotrain::launcher::parse_run_settings;
  const std::string base = "regions: [a]\n";
  const auto dflt = parse_run_settings(base, "t.yaml", ".", "t");
  CHECK(dflt.restart.enabled());
  CHECK(dflt.restart.max_restarts == 3);
  CHECK(dflt.restart.backoff_s == 1);
  const auto off =
      parse_run_settings(base + "run: {restart: {max_restarts: 0}}\n", "t.yaml", ".", "t");
  CHECK_FALSE(off.restart.enabled());
  const auto on = parse_run_settings(base + "run: {restart: {max_restarts: 3, backoff_s: 0.5}}\n",
                                     "t.yaml", ".", "t");
  CHECK(on.restart.max_restarts == 3);
  CHECK(on.restart.backoff_s == 0.5);
  CHECK(dflt.restart.healthy_after_s == 30);
  CHECK(parse_run_settings(base + "run: {restart: {healthy_after_s: 5}}\n", "t.yaml", ".", "t")
            .restart.healthy_after_s == 5);
  CHECK_THROWS_WITH_AS(
      parse_run_settings(base + "run: {restart: {healthy_after_s: -1}}\n", "t.yaml", ".", "t"),
      doctest::Contains("run.restart.healthy_after_s"), geotrain::InputError);
  CHECK_THROWS_WITH_AS(
      parse_run_settings(base + "run: {restart: {max_restart: 3}}\n", "t.yaml", ".", "t"),
      doctest::Contains("max_restart"), geotrain::InputError);
  CHECK_THROWS_WITH_AS(
      parse_run_settings(base + "run: {restart: {max_restarts: -1}}\n", "t.yaml", ".", "t"),
      doctest::Contains("run.restart.max_restarts"), geotrain::InputError);
  CHECK_THROWS_WITH_AS(parse_run_settings(base + "run: {restart: 3}\n", "t.yaml", ".", "t"),
                       doctest::Contains("run.restart must be a mapping"), geotrain::InputError);

  geotrain::test::TempDir tmp("launcher-restart-plan");
  const auto plan_with = [&](const std::string& text) {
    const auto settings = parse_run_settings(text, "t.yaml", ".", "t");
    geotrain::launcher::PortAllocator ports(0);
    return YAML::Load(
        geotrain::launcher::plan_deployment(text, "t.yaml", settings, tmp.path(), ports)
            .config_yaml);
  };
  CHECK(plan_with(base + "run: {restart: {max_restarts: 1}}\n")["server"]["checkpoint"]["every"]
            .as<int>() == 1);
  CHECK(plan_with(base + "server: {checkpoint: {every: 5}}\nrun: {restart: {max_restarts: 1}}\n")
            ["server"]["checkpoint"]["every"]
                .as<int>() == 5);
  CHECK(plan_with(base)["server"]["checkpoint"]["every"].as<int>() == 1);  // the default
  CHECK_FALSE(plan_with(base + "run: {restart: {max_restarts: 0}}\n")["server"]["checkpoint"]);
}

TEST_CASE("stops and partitions that geotrain chaos logs show as fault lines, newest last") {
  using nlohmann::json;
  const std::vector<json> chaos = {
      {{"time", 20.0}, {"event", "inject"}, {"fault", "partition"}, {"by", "chaos"}},
      {{"time", 20.0},
       {"event", "fault"},
       {"process", "a->b"},
       {"role", "link"},
       {"region", "a"},
       {"status", "partitioned for 10 s"},
       {"restart", 0},
       {"action", "wait"},
       {"by", "chaos"}},
      {{"time", 31.5}, {"event", "heal"}, {"process", "a->b"}, {"by", "chaos"}},
      {{"time", 32.25},
       {"event", "recovered"},
       {"process", "a->b"},
       {"restart", 0},
       {"recovery_s", 12.3},
       {"by", "chaos"}},
      {{"time", 40.0},
       {"event", "fault"},
       {"process", "server-b"},
       {"role", "server"},
       {"region", "b"},
       {"status", "stopped (SIGSTOP) for 10 s"},
       {"restart", 0},
       {"action", "wait"},
       {"by", "chaos"}},
  };
  auto chaos_faults = geotrain::launcher::fold_fault_list(chaos);
  REQUIRE(chaos_faults.size() == 2);
  CHECK(chaos_faults[0].waits);
  CHECK(geotrain::launcher::describe_fault(chaos_faults[0]) ==
        "a->b partitioned for 10 s at 20.0 s: training resumed after 12.3 s");
  CHECK(geotrain::launcher::describe_fault(chaos_faults[1]) ==
        "server-b stopped (SIGSTOP) for 10 s at 40.0 s: waiting for training to resume");
  // Merged with the launcher's own faults by time; the display keeps the newest.
  geotrain::launcher::Fault kill;
  kill.process = "netsim";
  kill.status = "killed by SIGKILL";
  kill.at_s = 30.0;
  kill.restart = 1;
  auto all = chaos_faults;
  all.push_back(kill);
  const auto lines = geotrain::launcher::fault_lines(all, 2);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "1 earlier fault(s), in events.jsonl");
  CHECK(lines[1] == "netsim killed by SIGKILL at 30.0 s: restarting");
  CHECK(lines[2].rfind("server-b stopped", 0) == 0);
  CHECK(geotrain::launcher::fault_lines(all, 6).size() == 3);
}

TEST_CASE("the summary's faults are folded from events.jsonl") {
  geotrain::test::TempDir tmp("launcher-restart-fold");
  {
    geotrain::launcher::FaultLog log(tmp.path() / "events.jsonl");
    log.started(0.1, "server-b", "server", 11, 0);
    const auto i = log.fault(5.0, "server-b", "server", "b", "killed by SIGKILL", true, 1);
    log.restarted(i, 6.5, 12, 4);
    log.recovered(i, 8.0, 1);
    log.fault(9.0, "worker-a-0", "worker", "a", "exit 1", false, 0);
    CHECK(geotrain::launcher::describe_fault(log.faults()[0]) ==
          "server-b killed by SIGKILL at 5.0 s: restarted in 1.5 s (checkpoint of round 4), "
          "training resumed after 3.0 s, 1 round(s) redone");
  }
  const auto j =
      geotrain::launcher::fold_faults(geotrain::launcher::read_jsonl(tmp.path() / "events.jsonl"));
  CHECK(j["restarts"] == 1);
  REQUIRE(j["faults"].size() == 2);
  CHECK(j["faults"][0]["process"] == "server-b");
  CHECK(j["faults"][0]["restart_seconds"].get<double>() == doctest::Approx(1.5));
  CHECK(j["faults"][0]["recovery_seconds"].get<double>() == doctest::Approx(3.0));
  CHECK(j["faults"][0]["restored_round"] == 4);
  CHECK(j["faults"][0]["rounds_lost"] == 1);
  CHECK(j["faults"][1]["restarted"] == false);
  CHECK(j["faults"][1]["status"] == "exit 1");
}
