// summary.json, report.md, progress lines and plots from a synthetic run folder whose worker
// metrics follow docs/run-folder.md, with values chosen so every field has a closed form.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "core/error.hpp"
#include "launcher/report/jsonl_tail.hpp"
#include "launcher/report/run_report.hpp"
#include "launcher/report/run_summary.hpp"
#include "launcher/report/shipped_measurements.hpp"
#include "launcher/report/summary_schema.hpp"
#include "launcher/run/child_process.hpp"
#include "launcher/run/progress_display.hpp"
#include "tests/temp_dir.hpp"

using namespace geotrain::launcher;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {
// Two regions x 2 workers, 4 rounds of 2 steps; each step computes 0.1 s, each round event
// pushes 1000 and pulls 500 bytes; staleness alternates 0, 1; accuracy 0.5 + 0.1 * round.
// Region "b" is one round slower to reach each accuracy (its evals come 1 s later). Region "a"'s
// steps report an optimizer step of 0.05 s, "b"'s none (as a build before optimizer_s); "a" runs
// on emulated hardware (step_time_ms 200: compute 0.1 + AllReduce 0.05 + optimizer 0.05). A step
// trains on 32 samples of the region.
void write_synthetic_run(const fs::path& dir) {
  for (std::string region : {"a", "b"}) {
    const double lag = region == "b" ? 1.0 : 0.0;
    for (int rank = 0; rank < 2; ++rank) {
      std::ofstream f(dir / fmt::format("worker-{}-{}.metrics.jsonl", region, rank));
      auto line = [&](json e) {
        e["region"] = region;
        e["rank"] = rank;
        f << e.dump() << "\n";
      };
      line({{"event", "start"},
            {"time", 0},
            {"world", 2},
            {"rounds", 4},
            {"local_steps", 2},
            {"parameters", 1000},
            {"step_time_ms", region == "a" ? 200 : 0},
            {"tokens_per_step", 32},
            {"blas", "OpenBLAS 0.3.21 DYNAMIC_ARCH Haswell"}});
      int step = 0;
      for (int round = 0; round < 4; ++round) {
        for (int k = 0; k < 2; ++k, ++step) {
          json e{
              {"event", "step"},          {"time", round + 0.1 * k},
              {"round", round},           {"step", step},
              {"loss", 2.0 - 0.2 * step}, {"compute_s", 0.1},
              {"comm_s", 0.05},           {"skipped", region == "b" && (step == 3 || step == 5)}};
          if (region == "a") e["optimizer_s"] = 0.05;
          line(e);
        }
        if (rank != 0) continue;
        line({{"event", "round"},
              {"time", round + 0.5},
              {"round", round},
              {"steps", 2},
              {"compute_s", 0.2},
              {"comm_s", 0.1},
              {"wait_s", 0.3},
              {"bytes_pushed", 1000},
              {"bytes_pulled", 500},
              {"staleness", round % 2}});
        line({{"event", "eval"},
              {"time", round + 0.6 + lag},
              {"round", round},
              {"step", step},
              {"test_accuracy", 0.5 + 0.1 * round},
              {"test_loss", 1.0}});
      }
      json done{{"event", "done"}, {"time", 4.0}, {"rounds", 4}, {"steps", 8}, {"wall_s", 4.0}};
      if (rank == 0) done["final_test_accuracy"] = region == "a" ? 0.8 : 0.9;
      line(done);
    }
  }
  std::ofstream n(dir / "netsim.jsonl");
  n << R"({"t_s":1,"link":"a->b","forward":{"bytes":10},"reverse":{"bytes":5}})"
       "\n"
    << R"({"t_s":2,"link":"a->b","forward":{"bytes":100},"reverse":{"bytes":50}})"
       "\n"
    << R"({"t_s":2,"link":"b->a","forward":{"bytes":7},"reverse":{"bytes":3}})"
       "\n";
  std::ofstream c(dir / "config.yaml");
  c << "regions: [a, b]\nmodel: {arch: 784-32-10}\nworker: {local_steps: 2, critical_codec: "
       "onebit+ef}\n"
       "run: {wan_profile: /x/wan/global-3.yaml, target_accuracy: 0.7}\n";
}
}  // namespace

TEST_CASE("the summary has every documented field with its closed-form value") {
  geotrain::test::TempDir tmp("launcher-summary");
  write_synthetic_run(tmp.path());
  SummaryInputs in;
  in.target_accuracy = 0.7;
  in.wall_seconds = 12.5;
  const auto s = build_summary(tmp.path(), in);
  CHECK(s["status"] == "completed");
  CHECK(s["final_test_accuracy"].get<double>() == doctest::Approx(0.85));  // mean of 0.8 and 0.9
  CHECK(s["wall_seconds"].get<double>() == doctest::Approx(12.5));
  CHECK(s["wan_bytes_total"].get<double>() == doctest::Approx(2 * 4 * 1500));
  CHECK(s["wan_wire_bytes_total"].get<double>() == doctest::Approx(150 + 10));  // newest per link
  CHECK(s["rounds"] == 4);
  CHECK(s["steps"] == 8);
  // Region b's leader logged two steps the anomaly guard refused (its rank 1 logs them too:
  // counted once, from the leader).
  CHECK(s["skipped_steps"] == 2);
  CHECK(s["per_region"]["a"]["skipped_steps"] == 0);
  CHECK(s["per_region"]["b"]["skipped_steps"] == 2);
  // 4 workers x 8 steps x 0.1 s compute over 4 workers x 4 s.
  CHECK(s["compute_utilization"].get<double>() == doctest::Approx(0.2));
  // Each region's own: b's 2 workers x 8 steps x 0.1 s over 2 workers x 4 s; a's emulated
  // hardware is busy for its whole steps, 0.2 s each.
  CHECK(s["per_region"]["a"]["compute_utilization"].get<double>() == doctest::Approx(0.4));
  CHECK(s["per_region"]["b"]["compute_utilization"].get<double>() == doctest::Approx(0.2));
  // Each region's leader's steps, and their samples over its wall time: 8 x 32 / 4 s.
  CHECK(s["per_region"]["a"]["steps"] == 8);
  CHECK(s["per_region"]["b"]["tokens_per_second"].get<double>() == doctest::Approx(64));
  // Region a's 2 workers x 8 steps x 0.05 s over the same 16 s (b's steps report none).
  CHECK(s["optimizer_utilization"].get<double>() == doctest::Approx(0.05));
  CHECK(s["mean_staleness"].get<double>() == doctest::Approx(0.5));
  // 0.7 is reached at round 2: a at 2.6 s, b at 3.6 s; every region by 3.6 s.
  CHECK(s["time_to_target_seconds"].get<double>() == doctest::Approx(3.6));
  CHECK(s["per_region"]["a"]["time_to_target_seconds"].get<double>() == doctest::Approx(2.6));
  CHECK(s["workers"] == 4);
}

TEST_CASE(
    "time to target is on the run's clock, between evaluations; the rounds' payload is set against "
    "fp32's; regions marked dead are listed") {
  geotrain::test::TempDir tmp("launcher-run-clock");
  write_synthetic_run(tmp.path());
  // The launcher started a's leader at 2 s and b's at 3 s of the run; server-b twice (a restart at
  // 10 s: its clock began again).
  std::ofstream(tmp.path() / "events.jsonl")
      << R"({"event":"start","process":"server-b","role":"server","restart":0,"time":0.5})"
         "\n"
      << R"({"event":"start","process":"worker-a-0","role":"worker","restart":0,"time":2.0})"
         "\n"
      << R"({"event":"start","process":"worker-b-0","role":"worker","restart":0,"time":3.0})"
         "\n"
      << R"({"event":"start","process":"server-b","role":"server","restart":1,"time":10.0})"
         "\n";
  std::ofstream(tmp.path() / "server-b.metrics.jsonl")
      << R"({"event":"stats","t":1.0})"
         "\n"
      << R"({"event":"membership","region":"a","change":"dead","why":"silent 30000 ms","t":2.0})"
      << "\n"
      << R"({"event":"stats","t":0.5})"
         "\n"
      << R"({"event":"membership","region":"a","change":"dead","why":"never registered","t":1.5})"
      << "\n";
  SummaryInputs in;
  in.target_accuracy = 0.65;  // crossed halfway between the evaluations of rounds 1 and 2
  const auto s = build_summary(tmp.path(), in);
  // a: 1.6 + 0.5 s on its clock, + 2 s; b: 2.6 + 0.5, + 3 s.
  CHECK(s["per_region"]["a"]["time_to_target_seconds"].get<double>() == doctest::Approx(4.1));
  CHECK(s["per_region"]["b"]["time_to_target_seconds"].get<double>() == doctest::Approx(6.1));
  CHECK(s["time_to_target_seconds"].get<double>() == doctest::Approx(6.1));
  // 2 regions x 4 rounds x 1500 bytes, against 8 bytes x 1000 parameters per region and round.
  CHECK(s["round_bytes"].get<double>() == doctest::Approx(12000));
  CHECK(s["fp32_round_bytes"].get<double>() == doctest::Approx(64000));
  REQUIRE(s["regions_marked_dead"].size() == 2);
  CHECK(s["regions_marked_dead"][0]["server"] == "b");
  CHECK(s["regions_marked_dead"][0]["region"] == "a");
  CHECK(s["regions_marked_dead"][0]["at_s"].get<double>() == doctest::Approx(2.5));
  CHECK(s["regions_marked_dead"][1]["at_s"].get<double>() == doctest::Approx(11.5));
  CHECK(s["regions_marked_dead"][1]["why"] == "never registered");
  const auto report = build_report(tmp.path(), s);
  CHECK(report.find("| the rounds' payload against fp32 for the same exchanges | 12.0 kB of "
                    "64.0 kB (18.8%, 81.2% less") != std::string::npos);
  CHECK(report.find("## Regions marked dead by a server") != std::string::npos);
  CHECK(report.find("| b | a | 11.5 | never registered |") != std::string::npos);
}

TEST_CASE("every key a summary holds, at every depth, is one core/run_summary.json gives it") {
  geotrain::test::TempDir tmp("launcher-summary-schema");
  write_synthetic_run(tmp.path());
  std::ofstream(tmp.path() / "events.jsonl")
      << R"({"event":"start","process":"server-b","role":"server","restart":0,"time":0.5})"
         "\n"
      << R"({"event":"exit","process":"server-b","role":"server","restart":0,"status":"killed","time":4.0})"
         "\n"
      << R"({"event":"start","process":"server-b","role":"server","restart":1,"time":5.0})"
         "\n";
  std::ofstream(tmp.path() / "server-b.metrics.jsonl")
      << R"({"event":"membership","region":"a","change":"dead","why":"silent 30000 ms","t":2.0})"
      << "\n";
  SummaryInputs in;
  in.target_accuracy = 0.7;
  const auto s = build_summary(tmp.path(), in);
  CHECK(geotrain::summary::check(s) == "");
  CHECK_FALSE(s[geotrain::summary::field::regions_marked_dead].empty());
  // The check names what the schema does not know, and where.
  auto extra = s;
  extra[geotrain::summary::field::per_region]["a"]["joules_per_token"] = 1.0;
  CHECK(geotrain::summary::check(extra) ==
        "summary.json object 'per_region' has a field 'joules_per_token' that "
        "core/run_summary.json does not give it (a)");
  extra = s;
  extra["wall"] = 1.0;
  CHECK(geotrain::summary::check(extra).find("'wall'") != std::string::npos);
}

TEST_CASE("a target never reached, and no target, are reported as such") {
  geotrain::test::TempDir tmp("launcher-target");
  write_synthetic_run(tmp.path());
  SummaryInputs in;
  in.target_accuracy = 0.95;
  CHECK(build_summary(tmp.path(), in)["time_to_target_seconds"].is_null());
  in.target_accuracy.reset();
  const auto s = build_summary(tmp.path(), in);
  CHECK_FALSE(s.contains("time_to_target_seconds"));
  CHECK(s["wall_seconds"].get<double>() == doctest::Approx(4.0));  // the slowest worker
}

TEST_CASE(
    "an empty or partial run folder still gets a summary, with nulls where nothing was measured") {
  geotrain::test::TempDir tmp("launcher-empty");
  SummaryInputs in;
  in.status = "failed";
  in.failure = "worker-a-0 failed (exit 1)";
  const auto s = write_summary_and_report(tmp.path(), in);
  CHECK(s["final_test_accuracy"].is_null());
  CHECK(s["mean_staleness"].is_null());
  CHECK(s["optimizer_utilization"].is_null());  // no step reported it
  CHECK(s["rounds"] == 0);
  CHECK(fs::file_size(tmp.path() / "summary.json") > 0);
  std::ifstream r(tmp.path() / "report.md");
  const std::string report((std::istreambuf_iterator<char>(r)), {});
  CHECK(report.find("**failed** (worker-a-0 failed (exit 1))") != std::string::npos);
}

TEST_CASE("the report shows settings from config.yaml and the results") {
  geotrain::test::TempDir tmp("launcher-report");
  write_synthetic_run(tmp.path());
  SummaryInputs in;
  in.target_accuracy = 0.7;
  in.wall_seconds = 12.5;
  write_summary_and_report(tmp.path(), in);
  std::ifstream r(tmp.path() / "report.md");
  const std::string report((std::istreambuf_iterator<char>(r)), {});
  CHECK(report.find("| `model.arch` | 784-32-10 |") != std::string::npos);
  CHECK(report.find("| `worker.critical_codec` | onebit+ef |") != std::string::npos);
  CHECK(report.find("| `run.wan_profile` | global-3 |") != std::string::npos);
  // Keys the config leaves to their defaults show the value the processes used: from the first
  // leader's start event, the codec defaults; "(default)" alone where neither says.
  CHECK(report.find("| `worker.rounds` | 4 (default) |") != std::string::npos);
  CHECK(report.find("| `worker.local_steps` | 2 |") != std::string::npos);  // as written
  CHECK(report.find("| `server.downlink_codec` | fp32 (default) |") != std::string::npos);
  CHECK(report.find("| `worker.lr` | (default) |") != std::string::npos);
  CHECK(report.find("| final test accuracy | 85.00% |") != std::string::npos);
  CHECK(report.find("| the optimizer's step, of the same time | 5.00% |") != std::string::npos);
  CHECK(
      report.find("| BLAS (the first region's leader) | OpenBLAS 0.3.21 DYNAMIC_ARCH Haswell |") !=
      std::string::npos);
  CHECK(report.find("| time to 70.00% (run clock, between evaluations) | 3.6 s |") !=
        std::string::npos);
  CHECK(report.find("| b | 90.00% | 4 |") != std::string::npos);
  const auto summary = json::parse(std::ifstream(tmp.path() / "summary.json"));
  CHECK(summary["rounds"] == 4);
}

TEST_CASE("a JSONL tail returns only complete new lines and skips broken ones") {
  geotrain::test::TempDir tmp("launcher-tail");
  const auto file = tmp.path() / "m.jsonl";
  JsonlTail tail(file);
  CHECK(tail.read_new().empty());  // not created yet
  std::ofstream f(file);
  f << "{\"a\":1}\n{\"a\":" << std::flush;
  auto got = tail.read_new();
  REQUIRE(got.size() == 1);
  CHECK(got[0]["a"] == 1);
  f << "2}\nnot json\n{\"a\":3}\n" << std::flush;
  got = tail.read_new();
  REQUIRE(got.size() == 2);
  CHECK(got[0]["a"] == 2);
  CHECK(got[1]["a"] == 3);
  CHECK(tail.bad_lines() == 1);
}

TEST_CASE("progress lines show each region's round, loss, accuracy, WAN MB, staleness and rate") {
  geotrain::test::TempDir tmp("launcher-progress");
  write_synthetic_run(tmp.path());
  const auto monitor = read_run_metrics(tmp.path(), std::nullopt);
  const auto lines = progress_lines(monitor, {"a", "b", "c"});
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].find("round    4/4") != std::string::npos);
  CHECK(lines[0].find("loss  0.6000") != std::string::npos);  // step 7: 2.0 - 1.4
  CHECK(lines[0].find("acc 80.00%") != std::string::npos);
  CHECK(lines[0].find("WAN     0.01 MB") != std::string::npos);
  CHECK(lines[0].find("stale   1") != std::string::npos);
  CHECK(lines[0].find("1.00 rounds/s") != std::string::npos);  // 4 rounds in 4 s
  CHECK(lines[2].find("starting") != std::string::npos);
}

TEST_CASE("the plot script draws four non-empty PNGs from a run folder") {
  REQUIRE_MESSAGE(fs::exists("/usr/bin/python3"), "python3 is missing: run scripts/bootstrap.sh");
  REQUIRE_MESSAGE(std::system("/usr/bin/python3 -c 'import matplotlib' 2>/dev/null") == 0,
                  "python3-matplotlib is missing: run scripts/bootstrap.sh");
  geotrain::test::TempDir tmp("launcher-plots");
  write_synthetic_run(tmp.path());
  ChildProcess plot("/usr/bin/python3",
                    {GEOTRAIN_SOURCE_DIR "/scripts/plot_run.py", tmp.path().string()},
                    tmp.path() / "plots.log");
  const auto status = plot.wait_for(std::chrono::seconds(120));
  REQUIRE(status);
  CHECK_MESSAGE(*status == 0, tail_lines(tmp.path() / "plots.log", 20));
  for (const char* png : {"loss_accuracy_vs_time.png", "loss_accuracy_vs_wan_bytes.png",
                          "staleness_histogram.png", "round_time_split.png"}) {
    REQUIRE_MESSAGE(fs::exists(tmp.path() / png), png);
    CHECK(fs::file_size(tmp.path() / png) > 1000);
    std::ifstream f(tmp.path() / png, std::ios::binary);
    char magic[4] = {};
    f.read(magic, 4);
    CHECK(std::string(magic + 1, 3) == "PNG");
  }
}

TEST_CASE("the overlap drain (a round event with steps 0) adds bytes but is not a training round") {
  RunMonitor m;
  m.add({{"event", "round"},
         {"region", "a"},
         {"time", 1},
         {"round", 0},
         {"steps", 4},
         {"bytes_pushed", 10},
         {"bytes_pulled", 5},
         {"staleness", 1}});
  m.add({{"event", "round"},
         {"region", "a"},
         {"time", 2},
         {"round", 0},
         {"steps", 0},
         {"bytes_pushed", 10},
         {"bytes_pulled", 5},
         {"staleness", 0}});
  const auto& r = m.regions().at("a");
  CHECK(r.rounds_done == 1);
  CHECK(r.wan_bytes() == doctest::Approx(30));
  CHECK(r.staleness_n == 2);
  CHECK(r.staleness_sum == doctest::Approx(1));
}

namespace {
// Regions a and b, one leader each, one round (1000 bytes pushed, 500 pulled), the flush at the
// end (40 pushed, 4000 pulled) and `done` of a run that ended with a global model at 0.87, the
// regions' own parameters at 0.8 and 0.9; the flush of the regions in `failed` failed.
void write_global_model_run(const fs::path& dir, const std::set<std::string>& failed_regions = {}) {
  for (std::string region : {"a", "b"}) {
    std::ofstream f(dir / fmt::format("worker-{}-0.metrics.jsonl", region));
    auto line = [&](json e) {
      e["region"] = region;
      e["rank"] = 0;
      f << e.dump() << "\n";
    };
    const bool failed = failed_regions.count(region) > 0;
    line({{"event", "start"}, {"time", 0}, {"model", "mlp"}, {"rounds", 1}});
    line({{"event", "round"},
          {"time", 1},
          {"round", 1},
          {"steps", 2},
          {"bytes_pushed", 1000},
          {"bytes_pulled", 500}});
    line({{"event", "eval"}, {"time", 1.5}, {"round", 1}, {"test_accuracy", 0.5}});
    json flush{{"event", "flush"}, {"time", 2}, {"global_model", !failed}};
    if (failed)
      flush["error"] = "the server of region a did not answer";
    else
      flush.update({{"bytes_pushed", 40}, {"bytes_pulled", 4000}});
    line(flush);
    json done{{"event", "done"},
              {"time", 3},
              {"rounds", 1},
              {"steps", 2},
              {"wall_s", 3},
              {"global_model", !failed},
              {"region_test_accuracy", region == "a" ? 0.8 : 0.9}};
    if (failed)
      done["global_model_error"] = "the server of region a did not answer";
    else
      done["final_test_accuracy"] = 0.87;
    line(done);
  }
}
}  // namespace

TEST_CASE("the summary's final figures are the global model's, and its flush bytes count") {
  geotrain::test::TempDir tmp("launcher-global");
  write_global_model_run(tmp.path());
  std::ofstream(tmp.path() / "model.safetensors") << "x";
  const auto s = build_summary(tmp.path(), {});
  CHECK(s["final_test_accuracy"].get<double>() == doctest::Approx(0.87));
  CHECK(s["global_model"] == true);
  CHECK(s["model_file"] == "model.safetensors");
  CHECK(s["wan_bytes_total"].get<double>() == doctest::Approx(2 * (1500 + 4040)));
  for (const auto& [name, own] : {std::pair{"a", 0.8}, std::pair{"b", 0.9}}) {
    const auto& r = s["per_region"][name];
    CHECK(r["region_test_accuracy"].get<double>() == doctest::Approx(own));
    CHECK(r["final_test_accuracy"].get<double>() == doctest::Approx(0.87));
    CHECK(r["global_model"] == true);
    CHECK(r["flush_bytes"].get<double>() == doctest::Approx(4040));
  }
  const auto report = build_report(tmp.path(), s);
  CHECK(report.find("| final figure of | the global model |") != std::string::npos);
  CHECK(report.find("| b | 90.00% | 1 |") != std::string::npos);  // the region's own
}

TEST_CASE("a region whose flush failed keeps its own figure; without any global model, the mean") {
  geotrain::test::TempDir tmp("launcher-global-failed");
  write_global_model_run(tmp.path(), {"b"});
  const auto s = build_summary(tmp.path(), {});
  // a evaluated the global model: that is the run's final figure.
  CHECK(s["final_test_accuracy"].get<double>() == doctest::Approx(0.87));
  CHECK(s["global_model"] == true);
  CHECK(s["model_file"].is_null());
  CHECK(s["per_region"]["b"]["global_model"] == false);
  CHECK(s["per_region"]["b"]["final_test_accuracy"].get<double>() == doctest::Approx(0.9));
  CHECK(s["per_region"]["b"]["flush_bytes"].get<double>() == 0);
  // Neither region has one: the mean of their own figures, as runs reported before.
  geotrain::test::TempDir none("launcher-global-none");
  write_global_model_run(none.path(), {"a", "b"});
  const auto n = build_summary(none.path(), {});
  CHECK(n["final_test_accuracy"].get<double>() == doctest::Approx(0.85));
  CHECK(n["global_model"] == false);
  CHECK(build_report(none.path(), n).find("no global model") != std::string::npos);
}

TEST_CASE(
    "the summary reports the WAN bytes of each codec phase, cut where any schedule switches") {
  geotrain::test::TempDir tmp("launcher-codec-phases");
  // Regions a and b, rounds 1..6: round t pushes 100 t and pulls 10 t bytes; the flush 7 + 70.
  // Region b's round 3 event merged the exchange of round 2 (overlap): it counts there.
  for (std::string region : {"a", "b"}) {
    std::ofstream f(tmp.path() / fmt::format("worker-{}-0.metrics.jsonl", region));
    auto line = [&](json e) {
      e["region"] = region;
      e["rank"] = 0;
      f << e.dump() << "\n";
    };
    line({{"event", "start"}, {"time", 0}, {"rounds", 6}});
    for (int t = 1; t <= 6; ++t) {
      json e{{"event", "round"},
             {"time", t},
             {"round", t},
             {"steps", 2},
             {"merged_round", t},
             {"bytes_pushed", 100 * t},
             {"bytes_pulled", 10 * t}};
      if (region == "b" && t == 3) e["merged_round"] = 2;
      line(e);
    }
    line({{"event", "flush"}, {"time", 7}, {"bytes_pushed", 7}, {"bytes_pulled", 70}});
  }
  std::ofstream(tmp.path() / "config.yaml")
      << "regions: [a, b]\nmodel: {arch: 784-32-10}\n"
         "worker: {critical_codec: [{until_round: 2, codec: int8}, {codec: onebit}]}\n"
         "server: {downlink_codec: [{until_round: 4, codec: int8}, {codec: 'onebit:scale=rms'}]}\n";
  const auto s = build_summary(tmp.path(), {});
  CHECK(geotrain::summary::check(s) == "");
  const auto& phases = s["codec_phases"];
  REQUIRE(phases.size() == 3);
  auto check_phase = [&](size_t i, uint64_t first, json last, const char* crit, const char* down,
                         double pushed, double pulled, uint64_t rounds) {
    CAPTURE(i);
    const auto& p = phases[i];
    CHECK(p["first_round"] == first);
    CHECK(p["last_round"] == last);
    CHECK(p["critical_codec"] == crit);
    CHECK(p["noncritical_codec"] == "fp32");  // the default
    CHECK(p["downlink_codec"] == down);
    CHECK(p["bytes_pushed"].get<double>() == doctest::Approx(pushed));
    CHECK(p["bytes_pulled"].get<double>() == doctest::Approx(pulled));
    CHECK(p["wan_bytes"].get<double>() == doctest::Approx(pushed + pulled));
    CHECK(p["rounds"] == rounds);
  };
  // Rounds 1-2 (b's round-3 event among them), 3-4, and 5 on.
  check_phase(0, 1, 2, "int8", "int8", 2 * 300 + 300, 2 * 30 + 30, 2);
  check_phase(1, 3, 4, "onebit", "int8", 2 * 700 - 300, 2 * 70 - 30, 2);
  check_phase(2, 5, nullptr, "onebit", "onebit:scale=rms", 2 * 1100, 2 * 110, 2);
  // Every byte once: the phases plus the flushes are the total.
  double sum = 2 * 77;
  for (const auto& p : phases) sum += p["wan_bytes"].get<double>();
  CHECK(s["wan_bytes_total"].get<double>() == doctest::Approx(sum));
  // report.md gets a table of them.
  const auto report = build_report(tmp.path(), s);
  CHECK(report.find("## Codec phases") != std::string::npos);
  CHECK(report.find("| 5- | `onebit` | `fp32` | `onebit:scale=rms` | 2 | 2.2 kB | 220 B |") !=
        std::string::npos);
}

TEST_CASE("a run without codec schedules has one codec phase with all the round bytes") {
  geotrain::test::TempDir tmp("launcher-one-phase");
  write_global_model_run(tmp.path());
  std::ofstream(tmp.path() / "config.yaml")
      << "regions: [a, b]\nmodel: {arch: 784-32-10}\nworker: {critical_codec: onebit}\n";
  const auto s = build_summary(tmp.path(), {});
  REQUIRE(s["codec_phases"].size() == 1);
  const auto& p = s["codec_phases"][0];
  CHECK(p["first_round"] == 1);
  CHECK(p["last_round"].is_null());
  CHECK(p["critical_codec"] == "onebit");
  CHECK(p["wan_bytes"].get<double>() == doctest::Approx(2 * 1500));  // the flush is not in it
}

TEST_CASE("run.compare_with: shipped measurements beside the run's own, as ratios") {
  const geotrain::YamlReader in{"lm.yaml"};
  const auto run = YAML::Load(
      "compare_with:\n"
      "  - {label: fixed H, time_to_target_s: 747.1, final: 1.894, measured: 2026-11-28}\n"
      "  - {label: no target}\n");
  const auto shipped = read_shipped_measurements(in, run);
  REQUIRE(shipped.size() == 2);
  CHECK(shipped[0].label == "fixed H");
  CHECK(*shipped[0].time_to_target_s == 747.1);
  CHECK_FALSE(shipped[1].final.has_value());
  const json s = {{"time_to_target_seconds", 257.0}, {"final_val_bpb", 1.8923}};
  const auto md = shipped_measurements_table(shipped, s, true);
  CHECK(md.find("This run: time to target 257.0 s, final validation bpb 1.892.") !=
        std::string::npos);
  CHECK(md.find("| fixed H | 747.1 s | 0.34x | 1.894 | 2026-11-28 |") != std::string::npos);
  CHECK(md.find("| no target | - | - | - | - |") != std::string::npos);
  CHECK(shipped_measurements_table({}, s, true).empty());
  // A classifier's accuracy, and a run that did not reach its target.
  const auto mlp = shipped_measurements_table({{"fp32", 30.0, 0.8875, ""}},
                                              json{{"final_test_accuracy", 0.89}}, false);
  CHECK(mlp.find("time to target not reached, final accuracy 89.00%") != std::string::npos);
  CHECK(mlp.find("| fp32 | 30.0 s | - | 88.75% | - |") != std::string::npos);

  CHECK_THROWS_WITH_AS(read_shipped_measurements(in, YAML::Load("compare_with: {label: x}")),
                       doctest::Contains("run.compare_with must be a list"), geotrain::InputError);
  CHECK_THROWS_WITH_AS(read_shipped_measurements(in, YAML::Load("compare_with: [{final: 1}]")),
                       doctest::Contains("run.compare_with[0] has no label"), geotrain::InputError);
  CHECK_THROWS_WITH_AS(
      read_shipped_measurements(in, YAML::Load("compare_with: [{label: a, time_s: 1}]")),
      doctest::Contains("run.compare_with[0]"), geotrain::InputError);
  CHECK_THROWS_WITH_AS(
      read_shipped_measurements(in, YAML::Load("compare_with: [{label: a, final: -1}]")),
      doctest::Contains("run.compare_with[0].final"), geotrain::InputError);
}
