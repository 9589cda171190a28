// `geotrain chaos` (launcher/chaos/chaos.hpp, docs/chaos.md): the pure parts (durations, the seeded
// schedule, the goodput window, partitions merged into netsim.links, which kinds may be killed),
// and the short CI version end to end: a 25 s reference and a 45 s chaos window on 2 regions x 1
// worker with a fault every ~8 s; it must finish as planned, with faults injected and recovered
// from, goodput above a floor, and no process left behind (about 2 minutes on 2 loaded cores).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <yaml-cpp/yaml.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "launcher/chaos/chaos.hpp"
#include "launcher/chaos/chaos_plan.hpp"
#include "launcher/report/jsonl_tail.hpp"
#include "tests/temp_dir.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace geotrain::launcher;

TEST_CASE("chaos durations read like 20s, 10m, 1.5h, 250ms or plain seconds") {
  CHECK(parse_duration("20s", "--kill-every") == 20);
  CHECK(parse_duration("10m", "--duration") == 600);
  CHECK(parse_duration("1.5h", "--duration") == 5400);
  CHECK_THROWS_WITH_AS(parse_duration("1e308h", "--duration"),
                       doctest::Contains("--duration is '1e308h': longer than a year"),
                       geotrain::InputError);
  CHECK(parse_duration("250ms", "--stop-for") == doctest::Approx(0.25));
  CHECK(parse_duration("90", "--duration") == 90);
  for (const char* bad : {"", "s", "-3s", "0", "10 m", "10x", "nan"})
    CHECK_THROWS_WITH_AS(parse_duration(bad, "--duration"), doctest::Contains("--duration"),
                         geotrain::InputError);
  CHECK(parse_fault_mix("2:1:1").kill == 2);
  CHECK(parse_fault_mix("1:0:0").partition == 0);
  for (const char* bad : {"2:1", "0:0:0", "a:b:c", "1:1:1:1", "-1:1:1"})
    CHECK_THROWS_AS(parse_fault_mix(bad), geotrain::InputError);
}

TEST_CASE("the chaos harness kills only the kinds of process geotrain run restarts") {
  CHECK(launcher_restarts("server"));
  CHECK(launcher_restarts("netsim"));
  CHECK(launcher_restarts("leader"));
  CHECK(launcher_restarts("worker"));
  CHECK_FALSE(launcher_restarts("launcher"));
  CHECK(process_kind("server-eu-west") == "server");
  CHECK(process_kind("netsim") == "netsim");
  CHECK(process_kind("worker-eu-west-0") == "leader");
  CHECK(process_kind("worker-ap-southeast-3") == "worker");
  CHECK(process_kind("plots") == "");
}

TEST_CASE(
    "the fault schedule is seeded, spaced 0.5-1.5 x the period, and never overlaps partitions") {
  ScheduleInputs in;
  in.seed = 7;
  in.every_s = 20;
  in.first_at_s = 20;
  in.horizon_s = 2000;
  in.regions = {"a", "b", "c"};
  const auto one = plan_faults(in);
  const auto two = plan_faults(in);
  REQUIRE(one.size() == two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    CHECK(one[i].at_s == two[i].at_s);
    CHECK(one[i].fault == two[i].fault);
    CHECK(one[i].pick == two[i].pick);
  }
  // About horizon / every faults, the first at first_at_s, gaps in [10, 30].
  CHECK(one.size() > 60);
  CHECK(one.size() < 140);
  CHECK(one.front().at_s == 20);
  std::map<ChaosFault, int> kinds;
  double partition_end = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    ++kinds[one[i].fault];
    if (i > 0) {
      CHECK(one[i].at_s - one[i - 1].at_s >= 10);
      CHECK(one[i].at_s - one[i - 1].at_s <= 30);
    }
    if (one[i].fault == ChaosFault::partition) {
      CHECK(one[i].at_s >= partition_end);
      partition_end = one[i].at_s + one[i].length_s;
      CHECK(one[i].from != one[i].to);
      CHECK(one[i].length_s == in.partition_s);
    }
  }
  // The default mix 2:1:1.
  CHECK(kinds[ChaosFault::kill] > kinds[ChaosFault::stop]);
  CHECK(kinds[ChaosFault::stop] > 0);
  CHECK(kinds[ChaosFault::partition] > 0);
  in.seed = 8;
  CHECK(plan_faults(in).front().pick != one.front().pick);
  // One region: no netsim, so no partitions.
  in.regions = {"a"};
  for (const auto& f : plan_faults(in)) CHECK(f.fault != ChaosFault::partition);
}

TEST_CASE("goodput's window runs from every region's first round to the window's end") {
  const std::vector<ProgressPoint> timeline = {{5, 0},   {8, 1},   {10, 3},
                                               {20, 13}, {30, 20}, {40, 25}};
  const auto w = window_rate(timeline, 28.0);
  REQUIRE(w.has_value());
  CHECK(w->ready_s == 8);
  CHECK(w->rounds_at_ready == 1);
  CHECK(w->end_s == 28);
  CHECK(w->rounds_at_end == 13);
  CHECK(w->rounds_per_s() == doctest::Approx(12.0 / 20.0));
  // A run that ended on its own: up to its last round.
  const auto all = window_rate(timeline, std::nullopt);
  CHECK(all->end_s == 40);
  CHECK(all->rounds_per_s() == doctest::Approx(24.0 / 32.0));
  CHECK_FALSE(window_rate({{1, 0}}, std::nullopt).has_value());
}

TEST_CASE(
    "goodput counts the rounds each region trained: not those it redid, nor those it jumped") {
  TrainedRounds trained({"a", "b"});
  for (uint64_t r = 1; r <= 4; ++r) CHECK(trained.finished("a", r));
  CHECK(trained.fewest() == 0);  // b has trained none
  CHECK(trained.finished("b", 1));
  CHECK(trained.finished("b", 2));
  CHECK(trained.fewest() == 2);
  // a restored from its snapshot of round 2 redoes rounds 3 and 4: they count once.
  CHECK_FALSE(trained.finished("a", 3));
  CHECK_FALSE(trained.finished("a", 4));
  CHECK(trained.finished("a", 5));
  CHECK(trained.trained().at("a") == 5);
  // b went on from its servers' count, round 40: the rounds it jumped count nothing.
  CHECK(trained.finished("b", 40));
  CHECK(trained.trained().at("b") == 3);
  CHECK(trained.fewest() == 3);
}

TEST_CASE("a reference run folder's rate comes from its leaders' round events") {
  geotrain::test::TempDir tmp("chaos-folder-timeline");
  {
    std::ofstream a(tmp.path() / "worker-a-0.metrics.jsonl");
    std::ofstream b(tmp.path() / "worker-b-0.metrics.jsonl");
    for (int r = 1; r <= 10; ++r) {
      a << json{{"event", "round"}, {"round", r}, {"steps", 4}, {"time", 2.0 + r}}.dump() << "\n";
      b << json{{"event", "round"}, {"round", r}, {"steps", 4}, {"time", 2.5 + r}}.dump() << "\n";
    }
    a << json{{"event", "round"}, {"round", 11}, {"steps", 0}, {"time", 30}}.dump() << "\n";
  }
  const auto w = window_rate(folder_timeline(tmp.path()), std::nullopt);
  REQUIRE(w.has_value());
  CHECK(w->ready_s == 3.5);  // b's first round
  CHECK(w->rounds() == 9);
  CHECK(w->end_s == 12.5);
  // Given as a reference: a window as long as a measured one (rounds after it not counted), or
  // the whole folder when it is shorter.
  const auto given = given_rate(folder_timeline(tmp.path()), 5.0);
  REQUIRE(given.has_value());
  CHECK(given->ready_s == 3.5);
  CHECK(given->end_s == 8.5);
  CHECK(given->rounds() == 5);
  CHECK(given_rate(folder_timeline(tmp.path()), 60.0)->end_s == 12.5);
  CHECK_THROWS_AS(folder_timeline(tmp.path() / "nothing"), geotrain::InputError);
}

TEST_CASE("the printed report of a failed chaos run without --verify names the failure") {
  // chaos.json as a run that failed mid-window writes it (verify: false, not asked for).
  const json report = {
      {"reference",
       {{"source", "measured"},
        {"rounds", 123},
        {"window_s", 300.0},
        {"rounds_per_s", 0.41},
        {"run_dir", "ref"}}},
      {"chaos",
       {{"rounds", 54},
        {"window_s", 155.8},
        {"rounds_per_s", 0.35},
        {"status", "failed"},
        {"run_dir", "chaos"},
        {"restarts", 5}}},
      {"faults", {{"injected", 7}, {"planned", 15}, {"kill", 5}, {"stop", 1}, {"partition", 1}}},
      {"goodput", 0.845},
      {"verify", false},
      {"leftover_pids", json::array()},
      {"ok", false},
      {"failure", "the chaos run failed"}};
  const auto text = describe_chaos(report);
  CHECK(text.find("goodput: 0.845") != std::string::npos);
  CHECK(text.find("verify:") == std::string::npos);
  CHECK(text.find("chaos: FAILED: the chaos run failed") != std::string::npos);
}

TEST_CASE("planned partitions are added to the user's netsim.links") {
  std::vector<PlannedFault> faults(3);
  faults[0] = {30, ChaosFault::partition, 10, "a", "b", 0};
  faults[1] = {50, ChaosFault::kill, 0, "", "", 5};
  faults[2] = {70, ChaosFault::partition, 5, "b", "a", 0};
  const auto user = YAML::Load("[{from: a, to: b, delay_ms: 5, faults: [{kind: reset, at_s: 1}]}]");
  const auto links = YAML::Load(links_with_partitions(user, faults));
  REQUIRE(links.size() == 2);
  CHECK(links[0]["delay_ms"].as<int>() == 5);
  REQUIRE(links[0]["faults"].size() == 2);
  CHECK(links[0]["faults"][1]["kind"].as<std::string>() == "partition");
  CHECK(links[0]["faults"][1]["at_s"].as<double>() == 30);
  CHECK(links[0]["faults"][1]["until_s"].as<double>() == 40);
  CHECK(links[1]["from"].as<std::string>() == "b");
  CHECK(links[1]["faults"][0]["until_s"].as<double>() == 75);
  CHECK(YAML::Load(links_with_partitions(YAML::Node(), {})).size() == 0);
}

namespace {
struct Finished {
  int code = -1;
  std::string text;
};
Finished run_geotrain(const std::string& args) {
  Finished f;
  FILE* pipe = popen((std::string(GEOTRAIN_BINARY) + " " + args + " 2>/dev/null").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buf;
  for (size_t got; (got = fread(buf.data(), 1, buf.size(), pipe)) > 0;)
    f.text.append(buf.data(), got);
  const int status = pclose(pipe);
  f.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return f;
}
}  // namespace

TEST_CASE("geotrain chaos refuses to kill what geotrain run does not restart") {
  geotrain::test::TempDir tmp("chaos-refuse");
  const auto config = tmp.path() / "c.yaml";
  std::ofstream(config) << "regions: [a]\nrun: {plots: false}\n";
  const auto r = run_geotrain("chaos --config " + config.string() + " --kill launcher --out " +
                              (tmp.path() / "runs").string());
  CHECK(r.code == 2);
}

TEST_CASE(
    "the short chaos run: kills, stops and partitions every ~8 s for 40 s; the run finishes the "
    "rounds of its window with one global model everywhere, goodput stays above a floor, and no "
    "process is left behind") {
  geotrain::test::TempDir tmp("chaos-short");
  const auto config = tmp.path() / "chaos.yaml";
  std::ofstream(config)
      << "regions: [us-east, eu-west]\n"
         "model: {arch: \"784-32-10\", critical: [\"fc2.*\"]}\n"
         "server: {staleness_bound: 0}\n"
         "worker: {workers_per_region: 1, batch_size: 32, local_steps: 4, rounds: 50, lr: 0.1,\n"
         "         critical_codec: fp32, noncritical_codec: int8, eval_every: 0,\n"
         "         step_delay_ms: {us-east: 40, eu-west: 40}}\n"
         "security: {curve: false}\n"
         "run: {name: short, wan_profile: " GEOTRAIN_SOURCE_DIR
         "/configs/wan/lan.yaml, restart: {max_restarts: 1, backoff_s: 0.5}}\n";
  const auto out = tmp.path() / "runs";
  const auto r = run_geotrain("chaos --config " + config.string() +
                              " --kill-every 8s --duration 40s --reference-duration 15s "
                              "--stop-for 4s --partition-for 4s --first-fault 12s --seed 8 --json "
                              "--verify --out " +
                              out.string());
  INFO(r.text);
  json j;
  REQUIRE_NOTHROW(j = json::parse(r.text));
  CHECK(r.code == 0);
  CHECK(j["ok"] == true);
  CHECK(j["leftover_pids"].empty());
  CHECK(j["reference"]["status"] == "stopped at window end");
  CHECK(j["chaos"]["status"] == "completed");
  CHECK(j["reference"]["rounds"].get<int>() > 10);
  // --verify: the chaos run had the rounds the reference does in 40 s, finished them, and every
  // region and server holds the same global model.
  const auto& v = j["verify"];
  INFO(v.dump());
  CHECK(v["ok"] == true);
  CHECK(v["identical"] == true);
  CHECK(v["rounds"].get<double>() >= 40 * j["reference"]["rounds_per_s"].get<double>());
  CHECK(v["rounds_done"] == v["rounds"]);
  // The processes' memory was sampled through the run.
  CHECK(j["chaos"]["memory"]["samples"].get<int>() > 20);
  CHECK(j["chaos"]["memory"]["processes"].contains("server-us-east"));
  // Faults: seed 8 plans kill, partition, kill, stop, partition from 12 s on, about 9 s apart;
  // kills and stops wait for the previous fault's recovery, so most of them, not all, happen.
  CHECK(j["faults"]["injected"].get<int>() >= 3);
  CHECK(j["faults"]["kill"].get<int>() >= 1);
  CHECK(j["faults"]["partition"].get<int>() >= 1);
  CHECK(j["chaos"]["restarts"].get<int>() >= 1);
  for (const auto& f : j["injected"]) CHECK(f["fault"].is_string());
  // Fault-free rounds/s against chaos: each fault costs a few seconds on a loaded machine.
  const double goodput = j["goodput"].get<double>();
  MESSAGE("short chaos: goodput " << goodput << ", " << j["faults"].dump() << ", reference "
                                  << j["reference"]["rounds_per_s"] << " rounds/s, chaos "
                                  << j["chaos"]["rounds_per_s"] << " rounds/s");
  CHECK(goodput > 0.25);
  CHECK(goodput < 1.3);
  // The faults are in the chaos run's events.jsonl and summary.json, as the launcher's are.
  const fs::path run = j["chaos"]["run_dir"].get<std::string>();
  int injects = 0;
  for (const auto& e : read_jsonl(run / "events.jsonl"))
    injects += e.value("event", "") == "inject";
  CHECK(injects == j["faults"]["injected"].get<int>());
  std::ifstream sf(run / "summary.json");
  const auto s = json::parse(sf);
  CHECK(s["faults"].size() >= j["faults"]["injected"].get<size_t>());
  CHECK(fs::exists(fs::path(j["chaos"]["run_dir"].get<std::string>()).parent_path().parent_path() /
                   "chaos.json"));
}
