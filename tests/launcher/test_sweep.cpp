// geotrain sweep: expanding a sweep file into points, the results table with deltas against the
// baseline, and a two-point sweep end to end (real servers and netsim, scripted workers that
// report an accuracy and WAN bytes depending on the point), resumed without rerunning.
#include <doctest/doctest.h>
#include <yaml-cpp/yaml.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "core/error.hpp"
#include "launcher/run/child_process.hpp"
#include "launcher/sweep/sweep.hpp"
#include "launcher/sweep/sweep_plan.hpp"
#include "tests/temp_dir.hpp"

using namespace geotrain;
using namespace geotrain::launcher;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {
fs::path write_base(const fs::path& dir) {
  std::ofstream(dir / "base.yaml")
      << "regions: [us-east, eu-west]\n"
         "model: {tensors: [{name: w, size: 4096}, {name: head.b, size: 10}], critical: "
         "[\"head.*\"]}\n"
         "server: {heartbeat_ms: 200, staleness_bound: 0}\n"
         "worker: {workers_per_region: 1, critical_codec: fp32}\n"
         "run: {wan_profile: " GEOTRAIN_SOURCE_DIR
         "/configs/wan/us-eu.yaml, target_accuracy: 0.5, plots: false,\n"
         "      netsim_stats_interval_s: 0.1}\n";
  return dir / "base.yaml";
}

std::string read(const fs::path& f) {
  std::ifstream in(f);
  return {std::istreambuf_iterator<char>(in), {}};
}
}  // namespace

TEST_CASE("a grid expands to every combination, with labels, values and the base's other keys") {
  test::TempDir tmp("sweep-plan");
  write_base(tmp.path());
  const auto plan = parse_sweep(
      "base: base.yaml\ngrid:\n  worker.critical_codec: [fp32, onebit]\n  server.staleness_bound: "
      "[0, 2]\n"
      "points:\n  - {label: extra, set: {worker.local_steps: 4}}\nbaseline: "
      "critical_codec=fp32,staleness_bound=0\n",
      "s.yaml", tmp.path(), "s");
  REQUIRE(plan.points.size() == 5);
  CHECK(plan.name == "s");
  CHECK(plan.points[0].label == "critical_codec=fp32,staleness_bound=0");
  CHECK(plan.points[3].label == "critical_codec=onebit,staleness_bound=2");
  CHECK(plan.points[4].label == "extra");
  CHECK(plan.keys == std::vector<std::string>{"worker.critical_codec", "server.staleness_bound",
                                              "worker.local_steps"});
  const auto c = YAML::Load(plan.points[3].config_yaml);
  CHECK(c["worker"]["critical_codec"].as<std::string>() == "onebit");
  CHECK(c["server"]["staleness_bound"].as<int>() == 2);
  CHECK(c["server"]["heartbeat_ms"].as<int>() == 200);
  CHECK(c["run"]["name"].as<std::string>() == plan.points[3].label);
  CHECK(YAML::Load(plan.points[4].config_yaml)["worker"]["local_steps"].as<int>() == 4);
  CHECK(plan.baseline == 0);
}

TEST_CASE("a point's config holds copies of the sweep's values: one point never changes another") {
  // yaml-cpp nodes are handles. Setting a section from the sweep's document into a point's config
  // shared it, so a later key of the same point (server.heartbeat_ms) wrote into the sweep's own
  // value, and the next point read it back; it also merged the document's node memory into every
  // config, which made planning quadratic (found by fuzz_sweep_config: 4096 points took minutes).
  test::TempDir tmp("sweep-plan");
  write_base(tmp.path());
  const auto plan = parse_sweep(
      "base: base.yaml\ngrid:\n  server: [{staleness_bound: 1}]\n  server.heartbeat_ms: [100, "
      "300]\n",
      "s.yaml", tmp.path(), "s");
  REQUIRE(plan.points.size() == 2);
  for (const auto& p : plan.points) CHECK(p.values.at(0).second == "{staleness_bound: 1}");
  const auto second = YAML::Load(plan.points[1].config_yaml)["server"];
  CHECK(second["staleness_bound"].as<int>() == 1);
  CHECK(second["heartbeat_ms"].as<int>() == 300);
}

TEST_CASE("sweep file errors name the key or value and what is allowed") {
  test::TempDir tmp("sweep-errors");
  write_base(tmp.path());
  auto error = [&](const std::string& yaml) {
    try {
      parse_sweep(yaml, "s.yaml", tmp.path(), "s");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error("base: base.yaml\ngird: {a: [1]}\n").find("unknown key 'gird'") != std::string::npos);
  CHECK(error("base: base.yaml\n").find("no points") != std::string::npos);
  CHECK(error("grid: {a: [1]}\n").find("'base' is missing") != std::string::npos);
  CHECK(error("base: base.yaml\ngrid: {worker.lr: []}\n").find("grid.worker.lr") !=
        std::string::npos);
  CHECK(error("base: base.yaml\ngrid: {worker.lr: [0.1]}\nbaseline: nope\n")
            .find("baseline is 'nope'") != std::string::npos);
  CHECK(error("base: base.yaml\npoints: [{label: a}, {label: a}]\n").find("label 'a'") !=
        std::string::npos);
  // A large grid's baseline error names its first labels and counts the rest, and comes before
  // any point's config is built: the bad wan below, in every point, is never looked up.
  const auto many = error(
      "base: base.yaml\ngrid: {wan: [no-such-profile], worker.seed: [1, 2, 3, 4, 5, 6, 7, 8, 9, "
      "10]}\nbaseline: nope\n");
  CHECK(many.find("baseline is 'nope'") != std::string::npos);
  CHECK(many.find("(wan=no-such-profile,seed=1, wan=no-such-profile,seed=2,") != std::string::npos);
  CHECK(many.find(", and 2 more)") != std::string::npos);
}

TEST_CASE("the results table gives deltas, WAN reduction and speedup against the baseline") {
  test::TempDir tmp("sweep-table");
  write_base(tmp.path());
  const auto plan = parse_sweep("base: base.yaml\ngrid: {worker.critical_codec: [fp32, onebit]}\n",
                                "s.yaml", tmp.path(), "s");
  const std::vector<SweepRow> rows{{&plan.points[0],
                                    json{{"status", "completed"},
                                         {"final_test_accuracy", 0.85},
                                         {"time_to_target_seconds", 20.0},
                                         {"wall_seconds", 30.0},
                                         {"wan_bytes_total", 1000.0}},
                                    "/r/0"},
                                   {&plan.points[1],
                                    json{{"status", "completed"},
                                         {"final_test_accuracy", 0.84},
                                         {"time_to_target_seconds", 10.0},
                                         {"wall_seconds", 25.0},
                                         {"wan_bytes_total", 100.0}},
                                    "/r/1"}};
  const auto csv = results_csv(plan, rows);
  CHECK(csv.find("label,worker.critical_codec,status,final_test_accuracy,accuracy_delta_pp") == 0);
  CHECK(csv.find("critical_codec=onebit,onebit,completed,0.84,-1,10,25,100,0.9,2,,/r/1") !=
        std::string::npos);
  CHECK(csv.find("critical_codec=fp32,fp32,completed,0.85,0,20,30,1000,0,1,yes,/r/0") !=
        std::string::npos);
  const auto md = results_markdown(plan, rows);
  CHECK(md.find("| critical_codec=onebit | onebit | completed | 84.00% | -1.00 | 10.0 | 25.0 | 100 "
                "| 90.00% | 2.00x |") != std::string::npos);
}

TEST_CASE("a sweep over wan profiles reports each setup's time on the WAN over its time on lan") {
  test::TempDir tmp("sweep-lan");
  write_base(tmp.path());
  const auto plan = parse_sweep(
      "base: base.yaml\ngrid: {worker.critical_codec: [fp32, onebit], wan: [us-eu, lan]}\n",
      "s.yaml", tmp.path(), "s", {}, fs::path(GEOTRAIN_SOURCE_DIR) / "configs");
  REQUIRE(plan.points.size() == 4);
  CHECK(plan.points[1].label == "critical_codec=fp32,wan=lan");
  CHECK(plan.keys == std::vector<std::string>{"worker.critical_codec", "wan"});
  CHECK(plan.points[0].wan_profile == "us-eu");
  CHECK(plan.points[1].wan_profile == "lan");
  CHECK(fs::path(YAML::Load(plan.points[1].config_yaml)["run"]["wan_profile"].as<std::string>())
            .filename() == "lan.yaml");
  CHECK(plan.points[0].setup == plan.points[1].setup);  // the same but for the WAN
  CHECK(plan.points[0].setup != plan.points[2].setup);

  auto summary = [](json ttt, double wall) {
    return json{{"status", "completed"},
                {"final_test_accuracy", 0.85},
                {"time_to_target_seconds", ttt},
                {"wall_seconds", wall},
                {"wan_bytes_total", 1000.0}};
  };
  // fp32: both reached the target, 30 s on us-eu vs 12 s on lan: 2.5x on time to target.
  // onebit: the lan run missed the target, so wall time: 40 s vs 20 s = 2x.
  const std::vector<SweepRow> rows{{&plan.points[0], summary(30.0, 50), "/r/0"},
                                   {&plan.points[1], summary(12.0, 25), "/r/1"},
                                   {&plan.points[2], summary(25.0, 40), "/r/2"},
                                   {&plan.points[3], summary(nullptr, 20), "/r/3"}};
  const auto ratios = wan_over_lan(rows);
  REQUIRE(ratios.size() == 4);
  REQUIRE(ratios[0]);
  CHECK(*ratios[0] == doctest::Approx(2.5));
  CHECK(*ratios[1] == doctest::Approx(1.0));
  REQUIRE(ratios[2]);
  CHECK(*ratios[2] == doctest::Approx(2.0));
  const auto csv = results_csv(plan, rows);
  CHECK(csv.find(",final_val_bpb,val_bpb_delta,wan_profile,wan_over_lan\n") != std::string::npos);
  CHECK(csv.find("/r/0,,,us-eu,2.5\n") != std::string::npos);
  CHECK(csv.find("/r/3,,,lan,1\n") != std::string::npos);
  const auto md = results_markdown(plan, rows);
  CHECK(md.find("| WAN profile | WAN / LAN time |") != std::string::npos);
  CHECK(md.find("| us-eu | 2.50x |") != std::string::npos);
  CHECK(md.find("| us-eu | 2.00x |") != std::string::npos);

  // A LAN run that did not finish gives no ratio; a sweep without lan has no such column.
  auto unfinished = rows;
  unfinished[1].summary = json{{"status", "failed"}};
  CHECK_FALSE(wan_over_lan(unfinished)[0]);
  const auto no_lan =
      parse_sweep("base: base.yaml\ngrid: {worker.critical_codec: [fp32, onebit]}\n", "s.yaml",
                  tmp.path(), "s");
  const std::vector<SweepRow> plain{{&no_lan.points[0], summary(1.0, 2), "/r/0"},
                                    {&no_lan.points[1], summary(1.0, 2), "/r/1"}};
  CHECK_FALSE(wan_over_lan(plain)[0]);
  CHECK(results_markdown(no_lan, plain).find("WAN / LAN") == std::string::npos);
  CHECK(results_csv(no_lan, plain).find("/r/0,,,us-eu,\n") != std::string::npos);
}

TEST_CASE("sweep --set overrides reach every point, and the wan key refuses unknown profiles") {
  test::TempDir tmp("sweep-set");
  write_base(tmp.path());
  const auto plan = parse_sweep(
      "base: base.yaml\npoints: [{label: x, set: {wan: lan}}, {label: y}]\n", "s.yaml", tmp.path(),
      "s", parse_overrides({"worker.local_steps=7"}), fs::path(GEOTRAIN_SOURCE_DIR) / "configs");
  for (const auto& p : plan.points)
    CHECK(YAML::Load(p.config_yaml)["worker"]["local_steps"].as<int>() == 7);
  CHECK(plan.points[0].wan_profile == "lan");
  CHECK(plan.points[1].wan_profile == "us-eu");  // the base's
  // The sweep varies the WAN profile, so --set cannot.
  CHECK_THROWS_WITH_AS(parse_sweep("base: base.yaml\ngrid: {wan: [lan]}\n", "s.yaml", tmp.path(),
                                   "s", parse_overrides({"run.wan_profile=x.yaml"})),
                       doctest::Contains("the sweep sets 'wan' itself"), InputError);
  CHECK_THROWS_WITH_AS(parse_sweep("base: base.yaml\ngrid: {wan: [mars]}\n", "s.yaml", tmp.path(),
                                   "s", {}, fs::path(GEOTRAIN_SOURCE_DIR) / "configs"),
                       doctest::Contains("s.yaml: wan is 'mars': no such WAN profile; tried "),
                       InputError);
  // A point's run.wan_profile is found as the wan key is: by name too.
  const auto named = parse_sweep("base: base.yaml\ngrid: {run.wan_profile: [lan]}\n", "s.yaml",
                                 tmp.path(), "s", {}, fs::path(GEOTRAIN_SOURCE_DIR) / "configs");
  CHECK(named.points[0].wan_profile == "lan");
  CHECK_THROWS_WITH_AS(parse_sweep("base: base.yaml\ngrid: {run.wan_profile: [mars.yaml]}\n",
                                   "s.yaml", tmp.path(), "s"),
                       doctest::Contains("s.yaml: run.wan_profile is 'mars.yaml': no such WAN "
                                         "profile"),
                       InputError);
  // A key written twice, in the sweep or in its base, names the file and both lines.
  CHECK_THROWS_WITH_AS(parse_sweep("base: base.yaml\ngrid: {worker.lr: [1]}\nbase: b.yaml\n",
                                   "s.yaml", tmp.path(), "s"),
                       doctest::Contains("s.yaml: key 'base' is written twice (lines 1 and 3)"),
                       InputError);
  std::ofstream(tmp.path() / "twice.yaml") << "regions: [a]\nworker: {lr: 1, lr: 2}\n";
  CHECK_THROWS_WITH_AS(
      parse_sweep("base: twice.yaml\ngrid: {worker.seed: [1]}\n", "s.yaml", tmp.path(), "s"),
      doctest::Contains("twice.yaml: key 'worker.lr' is written twice (both on "
                        "line 2)"),
      InputError);
  // A grid's points multiply: beyond kMaxSweepPoints it is refused before any point is built.
  CHECK_THROWS_WITH_AS(
      parse_sweep(
          "base: base.yaml\ngrid: {worker.seed: [1, 2, 3, 4, 5, 6, 7, 8, 9], worker.rounds: "
          "[1, 2, 3, 4, 5, 6, 7, 8], worker.lr: [1, 2, 3, 4, 5, 6, 7, 8], "
          "worker.local_steps: [1, 2, 3, 4, 5, 6, 7, 8]}\n",
          "s.yaml", tmp.path(), "s"),
      doctest::Contains("the grid has more than 1024 points"), InputError);
  // A key of 300 control characters reads, but yaml-cpp writes each as a 4-character escape, and
  // a written key longer than YAML's 1024 characters does not read back; the point is refused
  // (found by fuzz_sweep_config).
  CHECK_THROWS_WITH_AS(
      parse_sweep("base: base.yaml\ngrid:\n  worker." + std::string(300, '\x15') + ": [1, 2]\n",
                  "s.yaml", tmp.path(), "s"),
      doctest::Contains("does not read back as YAML"), InputError);
  CHECK_THROWS_WITH_AS(
      parse_sweep("base: base.yaml\npoints: [{set: {wan: lan, run.wan_profile: x.yaml}}]\n",
                  "s.yaml", tmp.path(), "s"),
      doctest::Contains("both wan and run.wan_profile"), InputError);
}

TEST_CASE("a two-point sweep runs both points, writes the results, and resumes without rerunning") {
  test::TempDir tmp("sweep-run");
  write_base(tmp.path());
  // The scripted worker reports accuracy 0.9 with fp32 and 0.8 with onebit, and 1000 vs 100 bytes.
  std::ofstream(tmp.path() / "fake-geotrain")
      << "#!/bin/sh\n"
         "if [ \"$1\" != worker ]; then exec " GEOTRAIN_BINARY
         " \"$@\"; fi\n"
         "region=$5; rank=$7; out=\"$(dirname \"$3\")/worker-$region-$rank.metrics.jsonl\"\n"
         "if grep -q 'critical_codec: onebit' \"$3\"; then acc=0.8; b=100; else acc=0.9; b=1000; "
         "fi\n"
         "echo "
         "\"{\\\"event\\\":\\\"round\\\",\\\"region\\\":\\\"$region\\\",\\\"rank\\\":0,"
         "\\\"time\\\":0.1,"
         "\\\"round\\\":0,\\\"bytes_pushed\\\":$b,\\\"bytes_pulled\\\":0,\\\"staleness\\\":0}\" >> "
         "\"$out\"\n"
         "echo "
         "\"{\\\"event\\\":\\\"done\\\",\\\"region\\\":\\\"$region\\\",\\\"rank\\\":0,\\\"time\\\":"
         "0.2,"
         "\\\"rounds\\\":1,\\\"steps\\\":1,\\\"wall_s\\\":0.2,\\\"final_test_accuracy\\\":$acc}\" "
         ">> \"$out\"\n";
  fs::permissions(tmp.path() / "fake-geotrain", fs::perms::owner_all);
  std::ofstream(tmp.path() / "two.yaml")
      << "base: base.yaml\ngrid: {worker.critical_codec: [fp32, onebit]}\n";
  SweepOptions o;
  o.sweep_file = tmp.path() / "two.yaml";
  o.out_dir = tmp.path() / "out";
  o.run.binary = (tmp.path() / "fake-geotrain").string();
  o.run.redraw = false;
  std::stop_source stop;
  CHECK(run_sweep(o, stop.get_token()) == 0);
  const auto dir = tmp.path() / "out" / "two";
  const auto csv = read(dir / "results.csv");
  CHECK(csv.find("critical_codec=fp32,fp32,completed,0.9,0,") != std::string::npos);
  CHECK(csv.find("critical_codec=onebit,onebit,completed,0.8,-10,") != std::string::npos);
  CHECK(csv.find(",0.9,") != std::string::npos);  // 90% less WAN traffic than the baseline
  CHECK(fs::file_size(dir / "results.md") > 0);
  CHECK(fs::exists(dir / "configs" / "critical_codec=onebit.yaml"));

  // Resumed: both points are complete, so nothing runs again (no new run folders).
  auto count_runs = [&] {
    int n = 0;
    for (const auto& e : fs::recursive_directory_iterator(dir / "runs"))
      n += e.path().filename() == "summary.json";
    return n;
  };
  CHECK(count_runs() == 2);
  CHECK(run_sweep(o, stop.get_token()) == 0);
  CHECK(count_runs() == 2);
  CHECK(read(dir / "results.csv") == csv);

  // --dry-run: the points listed with what the folder holds, every config checked, nothing run.
  const auto listed = [&](SweepOptions d) {
    d.dry_run = true;
    const auto file = tmp.path() / "dry-run.txt";
    d.run.progress = std::fopen(file.c_str(), "w");
    REQUIRE(d.run.progress != nullptr);
    const int code = run_sweep(d, stop.get_token());
    std::fclose(d.run.progress);
    CHECK(code == 0);
    return read(file);
  };
  auto text = listed(o);
  CHECK(text.find("  critical_codec=onebit: completed, ") != std::string::npos);
  CHECK(text.find("2 point(s), 2 completed, 0 to run") != std::string::npos);
  CHECK(count_runs() == 2);
  std::ofstream(tmp.path() / "three.yaml")
      << "name: two\nbase: base.yaml\ngrid: {worker.critical_codec: [fp32, onebit, int8]}\n";
  o.sweep_file = tmp.path() / "three.yaml";
  text = listed(o);
  CHECK(text.find("  critical_codec=int8: to run") != std::string::npos);
  CHECK(text.find("3 point(s), 2 completed, 1 to run") != std::string::npos);
  CHECK(fs::exists(dir / "configs" / "critical_codec=int8.yaml"));
  CHECK_FALSE(fs::exists(dir / "runs" / "critical_codec=int8"));
  // A point whose config its run would refuse is named, before anything runs.
  std::ofstream(tmp.path() / "bad.yaml")
      << "name: two\nbase: base.yaml\npoints: [{label: slow, set: {run.timeout_s: -1}}]\n";
  o.sweep_file = tmp.path() / "bad.yaml";
  o.dry_run = true;
  CHECK_THROWS_WITH_AS(run_sweep(o, stop.get_token()),
                       doctest::Contains("configs/slow.yaml: run.timeout_s is -1"), InputError);
  o.dry_run = false;
  o.sweep_file = tmp.path() / "two.yaml";

  // The comparison plots draw from results.csv and the runs' metrics.
  ChildProcess plot("/usr/bin/python3",
                    {GEOTRAIN_SOURCE_DIR "/scripts/plot_sweep.py", dir.string()},
                    dir / "plots.log");
  const auto status = plot.wait_for(std::chrono::seconds(120));
  REQUIRE(status);
  CHECK_MESSAGE(*status == 0, tail_lines(dir / "plots.log", 20));
  for (const char* png :
       {"sweep_accuracy_vs_time.png", "sweep_accuracy_vs_wan_bytes.png", "sweep_bars.png"})
    CHECK_MESSAGE((fs::exists(dir / png) && fs::file_size(dir / png) > 1000), png);
}

TEST_CASE("--jobs runs points at once, each with its progress log, and resumes as before") {
  test::TempDir tmp("sweep-jobs");
  write_base(tmp.path());
  // Each scripted worker notes its start, sleeps, notes its end (in one file for the whole sweep),
  // then reports accuracy 0.9 and one round.
  const auto order = tmp.path() / "order.txt";
  std::ofstream(tmp.path() / "fake-geotrain")
      << "#!/bin/sh\n"
         "if [ \"$1\" != worker ]; then exec " GEOTRAIN_BINARY
         " \"$@\"; fi\n"
         "region=$5; out=\"$(dirname \"$3\")/worker-$region-0.metrics.jsonl\"\n"
         "echo start >> "
      << order.string()
      << "\n"
         "sleep 2\n"
         "echo end >> "
      << order.string()
      << "\n"
         "echo \"{\\\"event\\\":\\\"done\\\",\\\"region\\\":\\\"$region\\\",\\\"rank\\\":0,"
         "\\\"time\\\":0.2,\\\"rounds\\\":1,\\\"steps\\\":1,\\\"wall_s\\\":0.2,"
         "\\\"final_test_accuracy\\\":0.9}\" >> \"$out\"\n";
  fs::permissions(tmp.path() / "fake-geotrain", fs::perms::owner_all);
  std::ofstream(tmp.path() / "three.yaml") << "base: base.yaml\ngrid: {worker.seed: [1, 2, 3]}\n";
  SweepOptions o;
  o.sweep_file = tmp.path() / "three.yaml";
  o.out_dir = tmp.path() / "out";
  o.run.binary = (tmp.path() / "fake-geotrain").string();
  o.run.redraw = false;
  o.jobs = 3;
  std::stop_source stop;
  CHECK(run_sweep(o, stop.get_token()) == 0);
  const auto dir = tmp.path() / "out" / "three";
  const auto csv = read(dir / "results.csv");
  for (const char* label : {"seed=1", "seed=2", "seed=3"}) {
    CAPTURE(label);
    CHECK(csv.find(std::string(label) + ",") != std::string::npos);
    CHECK(read(dir / "runs" / label / "progress.log").find("completed") != std::string::npos);
  }
  CHECK(csv.find(",failed") == std::string::npos);
  // Two workers a point: more than two running at once means points overlapped.
  int running = 0, most = 0, lines = 0;
  std::ifstream in(order);
  for (std::string line; std::getline(in, line); ++lines) {
    running += line == "start" ? 1 : -1;
    most = std::max(most, running);
  }
  CHECK(lines == 12);
  CHECK(most > 2);
  // Resumed with --jobs: nothing left to run.
  const auto before = read(order);
  CHECK(run_sweep(o, stop.get_token()) == 0);
  CHECK(read(order) == before);

  // A stop request ends every point that runs, and the sweep says it was interrupted.
  o.out_dir = tmp.path() / "stopped";
  std::stop_source stopper;
  std::jthread stop_soon([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    stopper.request_stop();
  });
  CHECK(run_sweep(o, stopper.get_token()) == 130);
  const auto stopped = read(tmp.path() / "stopped" / "three" / "results.csv");
  CHECK(stopped.find("seed=1,") != std::string::npos);  // the rows of the points that ran
  CHECK(stopped.find(",completed,") == std::string::npos);
}

TEST_CASE("a sweep checks every point before it writes or runs anything, with --jobs too") {
  test::TempDir tmp("sweep-check");
  write_base(tmp.path());
  // The last point's config is one its run would refuse: found before the first point runs.
  std::ofstream(tmp.path() / "late.yaml")
      << "base: base.yaml\npoints: [{label: good, set: {worker.seed: 1}},\n"
         "         {label: slow, set: {run.timeout_s: -1}}]\n";
  SweepOptions o;
  o.sweep_file = tmp.path() / "late.yaml";
  o.out_dir = tmp.path() / "out";
  o.run.binary = (tmp.path() / "no-such-geotrain").string();  // nothing may start
  o.run.redraw = false;
  std::stop_source stop;
  for (int jobs : {1, 2}) {
    CAPTURE(jobs);
    o.jobs = jobs;
    CHECK_THROWS_WITH_AS(run_sweep(o, stop.get_token()),
                         doctest::Contains("configs/slow.yaml: run.timeout_s is -1"), InputError);
    CHECK_FALSE(fs::exists(tmp.path() / "out"));  // no folder, no config, no run
  }

  // An error that only comes when a point's turn comes (here the run's own check, refusing from
  // its third call: the first two are the sweep's check of both points) ends the sweep with that
  // error. With --jobs the points run on threads of their own, where an exception that escaped
  // used to terminate the process.
  std::ofstream(tmp.path() / "two.yaml") << "base: base.yaml\ngrid: {worker.seed: [1, 2]}\n";
  o.sweep_file = tmp.path() / "two.yaml";
  std::atomic<int> checks = 0;
  o.run.validate = [&checks](const std::string&, const std::string& source) {
    if (++checks > 2) throw InputError(source + ": refused when its turn came");
  };
  o.jobs = 2;
  CHECK_THROWS_WITH_AS(run_sweep(o, stop.get_token()),
                       doctest::Contains("refused when its turn came"), InputError);
  CHECK(checks >= 3);

  // A name is the sweep's folder: never a path out of the output folder.
  for (const char* name : {"../escape", "/tmp/elsewhere", "\"\"", ".."}) {
    CAPTURE(name);
    std::ofstream(tmp.path() / "named.yaml")
        << "name: " << name << "\nbase: base.yaml\ngrid: {worker.seed: [1]}\n";
    o.sweep_file = tmp.path() / "named.yaml";
    CHECK_THROWS_WITH_AS(run_sweep(o, stop.get_token()),
                         doctest::Contains("allowed: a folder name"), InputError);
  }
  CHECK_FALSE(fs::exists(tmp.path() / "escape"));
}

TEST_CASE("the sweep's set reaches every point; --set and a point's own key change it") {
  test::TempDir tmp("sweep-shared");
  write_base(tmp.path());
  const auto plan = parse_sweep(
      "base: base.yaml\nset: {worker.critical_codec: onebit, worker.local_steps: 4, wan: lan}\n"
      "grid: {worker.seed: [1, 2]}\npoints: [{label: own, set: {worker.local_steps: 8}}]\n",
      "s.yaml", tmp.path(), "s", parse_overrides({"worker.critical_codec=int8"}),
      fs::path(GEOTRAIN_SOURCE_DIR) / "configs");
  REQUIRE(plan.points.size() == 3);
  // Only the varied keys make labels and columns.
  CHECK(plan.points[0].label == "seed=1");
  CHECK(plan.keys == std::vector<std::string>{"worker.seed", "worker.local_steps"});
  for (size_t i = 0; i < 3; ++i) {
    const auto c = YAML::Load(plan.points[i].config_yaml);
    CHECK(c["worker"]["critical_codec"].as<std::string>() == "int8");  // --set over set
    CHECK(c["worker"]["local_steps"].as<int>() == (i == 2 ? 8 : 4));   // the point's own key
    CHECK(c["server"]["heartbeat_ms"].as<int>() == 200);               // the base's
    CHECK(plan.points[i].wan_profile == "lan");                        // set's wan, found by name
  }
  CHECK(YAML::Load(plan.points[1].config_yaml)["worker"]["seed"].as<int>() == 2);
  CHECK_THROWS_WITH_AS(parse_sweep("base: base.yaml\nset: [worker.seed]\ngrid: {worker.lr: [1]}\n",
                                   "s.yaml", tmp.path(), "s"),
                       doctest::Contains("s.yaml: set must map dotted config keys to values"),
                       InputError);
  CHECK_THROWS_WITH_AS(
      parse_sweep("base: base.yaml\nset: {wan: mars}\ngrid: {worker.lr: [1]}\n", "s.yaml",
                  tmp.path(), "s", {}, fs::path(GEOTRAIN_SOURCE_DIR) / "configs"),
      doctest::Contains("s.yaml: wan is 'mars': no such WAN profile"), InputError);
}

TEST_CASE("every sweep shipped in configs/sweeps loads, each point setting the keys it names") {
  size_t files = 0;
  for (const auto& entry :
       fs::directory_iterator(fs::path(GEOTRAIN_SOURCE_DIR) / "configs/sweeps")) {
    if (entry.path().extension() != ".yaml") continue;
    CAPTURE(entry.path().string());
    ++files;
    const auto plan = load_sweep(entry.path());
    REQUIRE_FALSE(plan.points.empty());
    for (const auto& point : plan.points) {
      CAPTURE(point.label);
      const auto config = YAML::Load(point.config_yaml);
      CHECK(config["run"]["name"].as<std::string>() == point.label);
      for (const auto& [key, value] : point.values) {
        if (key == "wan") {  // a WAN profile by name: run.wan_profile is that file
          CHECK(fs::is_regular_file(config["run"]["wan_profile"].as<std::string>()));
          continue;
        }
        // A dotted path of any depth (regions, worker.lr, worker.optimizer.kind).
        YAML::Node node = YAML::Clone(config);
        size_t start = 0;
        for (; start != std::string::npos && node.IsMap();) {
          const size_t dot = key.find('.', start);
          const YAML::Node parent = node;
          node.reset(parent[key.substr(start, dot == std::string::npos ? dot : dot - start)]);
          start = dot == std::string::npos ? dot : dot + 1;
        }
        CHECK_MESSAGE((start == std::string::npos && node.IsDefined()), key);
      }
    }
  }
  CHECK(files >= 2);
}
