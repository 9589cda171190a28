// The launcher on language-model runs: run.target_val_bpb, summary.json, report.md, progress
// lines, the final line, sweep results and plots, from synthetic run folders whose worker
// metrics follow docs/run-folder.md (eval events with val_bpb/val_loss, `done` with
// final_val_bpb/final_val_loss), with values chosen so every field has a closed form.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "core/error.hpp"
#include "launcher/report/jsonl_tail.hpp"
#include "launcher/report/run_report.hpp"
#include "launcher/report/run_summary.hpp"
#include "launcher/run/child_process.hpp"
#include "launcher/run/progress_display.hpp"
#include "launcher/run/run_settings.hpp"
#include "launcher/sweep/sweep_plan.hpp"
#include "tests/temp_dir.hpp"

using namespace geotrain;
using namespace geotrain::launcher;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {
const double kLn2 = std::log(2.0);

// Two regions x 2 workers of a GPT, 4 rounds of 2 steps, each round event pushing 1000 and
// pulling 500 bytes. The leaders evaluate val_bpb = 3.0 - 0.25 * round (3.0, 2.75, 2.5, 2.25)
// with val_loss = val_bpb * ln 2 (nats per byte); region "b" evaluates 1 s later than "a".
// With `finished`, the leaders' `done` carries final_val_bpb 2.2 (a) and 2.4 (b).
void write_lm_run(const fs::path& dir, bool finished = true) {
  for (std::string region : {"a", "b"}) {
    const double lag = region == "b" ? 1.0 : 0.0;
    for (int rank = 0; rank < 2; ++rank) {
      std::ofstream f(dir / fmt::format("worker-{}-{}.metrics.jsonl", region, rank));
      auto line = [&](json e) {
        e["region"] = region;
        e["rank"] = rank;
        f << e.dump() << "\n";
      };
      line({{"event", "start"}, {"time", 0}, {"model", "gpt"}, {"world", 2}, {"rounds", 4}});
      int step = 0;
      for (int round = 0; round < 4; ++round) {
        for (int k = 0; k < 2; ++k, ++step)
          line({{"event", "step"},
                {"time", round + 0.1 * k},
                {"round", round},
                {"step", step},
                {"loss", 4.0 - 0.25 * step},
                {"compute_s", 0.1},
                {"comm_s", 0.05}});
        if (rank != 0) continue;
        line({{"event", "round"},
              {"time", round + 0.5},
              {"round", round},
              {"steps", 2},
              {"bytes_pushed", 1000},
              {"bytes_pulled", 500},
              {"staleness", 0}});
        const double bpb = 3.0 - 0.25 * round;
        line({{"event", "eval"},
              {"time", round + 0.6 + lag},
              {"round", round},
              {"step", step},
              {"val_bpb", bpb},
              {"val_loss", bpb * kLn2},
              {"val_accuracy", 0.3 + 0.05 * round}});
      }
      if (!finished) continue;
      json done{{"event", "done"}, {"time", 4.0}, {"rounds", 4}, {"steps", 8}, {"wall_s", 4.0}};
      if (rank == 0) {
        const double bpb = region == "a" ? 2.2 : 2.4;
        done["final_val_bpb"] = bpb;
        done["final_val_loss"] = bpb * kLn2;
      }
      line(done);
    }
  }
  std::ofstream(dir / "config.yaml") << "regions: [a, b]\nmodel: {kind: gpt, preset: gpt-tiny}\n"
                                        "worker: {local_steps: 2}\nrun: {wan_profile: "
                                        "/x/wan/global-3.yaml, target_val_bpb: 2.5}\n";
}

// One region, one worker of a classifier: final test accuracy 0.9.
void write_classifier_run(const fs::path& dir) {
  std::ofstream(dir / "worker-a-0.metrics.jsonl")
      << R"({"event":"start","region":"a","rank":0,"time":0,"model":"mlp","rounds":1})"
         "\n"
      << R"({"event":"eval","region":"a","rank":0,"time":1,"test_accuracy":0.9,"test_loss":0.3})"
         "\n"
      << R"({"event":"done","region":"a","rank":0,"time":1,"wall_s":1,"final_test_accuracy":0.9})"
         "\n";
}

std::string read(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string settings_error(const std::string& yaml) {
  try {
    parse_run_settings(yaml, "t.yaml", ".", "t");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Runs a plot script on a folder; its output goes to plots.log there.
void run_plot_script(const char* script, const fs::path& dir) {
  REQUIRE_MESSAGE(std::system("/usr/bin/python3 -c 'import matplotlib' 2>/dev/null") == 0,
                  "python3-matplotlib is missing: run scripts/bootstrap.sh");
  ChildProcess plot("/usr/bin/python3",
                    {std::string(GEOTRAIN_SOURCE_DIR "/scripts/") + script, dir.string()},
                    dir / "plots.log");
  const auto status = plot.wait_for(std::chrono::seconds(120));
  REQUIRE(status);
  REQUIRE_MESSAGE(*status == 0, tail_lines(dir / "plots.log", 20));
}

// A PNG of more than 1 kB; returns its bytes (matplotlib writes the Title metadata as text).
std::string png(const fs::path& file) {
  REQUIRE_MESSAGE(fs::exists(file), file.string());
  const auto bytes = read(file);
  CHECK(bytes.size() > 1000);
  CHECK(bytes.substr(1, 3) == "PNG");
  return bytes;
}
}  // namespace

TEST_CASE("run.target_val_bpb is read, must be above 0, and excludes run.target_accuracy") {
  const auto s =
      parse_run_settings("regions: [a]\nrun: {target_val_bpb: 2.5}\n", "t.yaml", ".", "t");
  REQUIRE(s.target_val_bpb);
  CHECK(*s.target_val_bpb == doctest::Approx(2.5));
  CHECK_FALSE(s.target_accuracy);
  CHECK(s.target().val_bpb == s.target_val_bpb);

  const auto both =
      settings_error("regions: [a]\nrun: {target_accuracy: 0.8, target_val_bpb: 2.5}\n");
  CHECK(both.find("run.target_accuracy and run.target_val_bpb are both set") != std::string::npos);
  CHECK(settings_error("regions: [a]\nrun: {target_val_bpb: 0}\n")
            .find("run.target_val_bpb is 0, allowed: (0, 100]") != std::string::npos);
  CHECK(settings_error("regions: [a]\nrun: {target_val_bpb: -1}\n")
            .find("run.target_val_bpb is -1") != std::string::npos);
  CHECK(settings_error("regions: [a]\nrun: {target_val_bpb: low}\n").find("run.target_val_bpb") !=
        std::string::npos);
}

TEST_CASE("a language model's summary has its final validation bpb and loss, and no accuracy") {
  test::TempDir tmp("lm-summary");
  write_lm_run(tmp.path());
  SummaryInputs in;
  in.wall_seconds = 12.5;
  const auto s = build_summary(tmp.path(), in);
  CHECK(s["model"] == "gpt");
  CHECK(s["final_val_bpb"].get<double>() == doctest::Approx(2.3));  // mean of 2.2 and 2.4
  CHECK(s["final_val_loss"].get<double>() == doctest::Approx(2.3 * kLn2));
  REQUIRE(s.contains("final_test_accuracy"));
  CHECK(s["final_test_accuracy"].is_null());
  CHECK(s["per_region"]["b"]["final_val_bpb"].get<double>() == doctest::Approx(2.4));
  CHECK(s["per_region"]["a"]["final_val_loss"].get<double>() == doctest::Approx(2.2 * kLn2));
  CHECK(s["per_region"]["a"]["final_test_accuracy"].is_null());
  // The classifier's keys are all still there.
  CHECK(s["wan_bytes_total"].get<double>() == doctest::Approx(2 * 4 * 1500));
  CHECK(s["rounds"] == 4);
  CHECK(s["steps"] == 8);
  CHECK(s["wall_seconds"].get<double>() == doctest::Approx(12.5));
  CHECK_FALSE(s.contains("time_to_target_seconds"));
  CHECK(is_language_model(s));
}

TEST_CASE("a language model that stopped before `done` reports its newest validation bpb") {
  test::TempDir tmp("lm-partial");
  write_lm_run(tmp.path(), /*finished=*/false);
  const auto s = build_summary(tmp.path(), {});
  CHECK(s["final_val_bpb"].get<double>() == doctest::Approx(2.25));  // round 3, both regions
  CHECK(s["final_val_loss"].get<double>() == doctest::Approx(2.25 * kLn2));
}

TEST_CASE("a classifier's summary keeps its accuracy and has null validation bpb and loss") {
  test::TempDir tmp("lm-classifier");
  write_classifier_run(tmp.path());
  const auto s = build_summary(tmp.path(), {});
  CHECK(s["model"] == "mlp");
  CHECK(s["final_test_accuracy"].get<double>() == doctest::Approx(0.9));
  REQUIRE(s.contains("final_val_bpb"));
  CHECK(s["final_val_bpb"].is_null());
  CHECK(s["final_val_loss"].is_null());
  CHECK(s["per_region"]["a"]["final_val_bpb"].is_null());
  CHECK_FALSE(is_language_model(s));
}

TEST_CASE("time to a bpb target is when every region's leader evaluated at or below it") {
  test::TempDir tmp("lm-target");
  write_lm_run(tmp.path());
  SummaryInputs in;
  in.target_val_bpb = 2.5;  // reached at round 2: a at 2.6 s, b at 3.6 s
  auto s = build_summary(tmp.path(), in);
  CHECK(s["target_val_bpb"].get<double>() == doctest::Approx(2.5));
  CHECK_FALSE(s.contains("target_accuracy"));
  CHECK(s["time_to_target_seconds"].get<double>() == doctest::Approx(3.6));
  CHECK(s["per_region"]["a"]["time_to_target_seconds"].get<double>() == doctest::Approx(2.6));

  in.target_val_bpb = 2.0;  // never evaluated that low
  s = build_summary(tmp.path(), in);
  REQUIRE(s.contains("time_to_target_seconds"));
  CHECK(s["time_to_target_seconds"].is_null());
  CHECK(s["per_region"]["b"]["time_to_target_seconds"].is_null());
}

TEST_CASE("the report of a language model shows validation bits per byte, not accuracy") {
  test::TempDir tmp("lm-report");
  write_lm_run(tmp.path());
  SummaryInputs in;
  in.target_val_bpb = 2.5;
  in.wall_seconds = 12.5;
  write_summary_and_report(tmp.path(), in);
  const auto report = read(tmp.path() / "report.md");
  CHECK(report.find("| `model.kind` | gpt |") != std::string::npos);
  CHECK(report.find("| `model.preset` | gpt-tiny |") != std::string::npos);
  CHECK(report.find("| `run.target_val_bpb` | 2.5 |") != std::string::npos);
  CHECK(report.find("| final validation bits per byte (lower is better) | 2.300 |") !=
        std::string::npos);
  CHECK(report.find(fmt::format("| final validation loss (nats per byte) | {:.3f} |",
                                2.3 * kLn2)) != std::string::npos);
  CHECK(report.find("| time to 2.500 bpb (run clock, between evaluations) | 3.6 s |") !=
        std::string::npos);
  CHECK(report.find("| region | validation bpb | rounds |") != std::string::npos);
  CHECK(report.find("| b | 2.400 | 4 |") != std::string::npos);
  CHECK(report.find("accuracy") == std::string::npos);
}

TEST_CASE("progress lines of a language model show the newest validation bpb") {
  test::TempDir tmp("lm-progress");
  write_lm_run(tmp.path(), /*finished=*/false);
  const auto monitor = read_run_metrics(tmp.path(), RunTarget{});
  CHECK(monitor.model() == "gpt");
  const auto lines = progress_lines(monitor, {"a", "b"});
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].find("bpb   2.25") != std::string::npos);  // round 3: 3.0 - 0.75
  CHECK(lines[0].find("acc") == std::string::npos);
  CHECK(lines[0].find("loss  2.2500") != std::string::npos);  // step 7: 4.0 - 1.75
  CHECK(lines[1].find("round    4/4") != std::string::npos);
}

TEST_CASE("the final line names the validation bpb and whether the bpb target was reached") {
  test::TempDir tmp("lm-line");
  write_lm_run(tmp.path());
  SummaryInputs in;
  in.target_val_bpb = 2.5;
  in.wall_seconds = 12.5;
  auto line = outcome_line("r", build_summary(tmp.path(), in));
  CHECK(line.find("run r: completed in 12.5 s; final validation bpb 2.300;") == 0);
  CHECK(line.find("; target 2.500 bpb reached (every region by 3.6 s)") != std::string::npos);
  in.target_val_bpb = 2.25;  // the final 2.3 is above it
  line = outcome_line("r", build_summary(tmp.path(), in));
  CHECK(line.find("; target 2.250 bpb NOT reached") != std::string::npos);

  test::TempDir cls("lm-line-classifier");
  write_classifier_run(cls.path());
  SummaryInputs c;
  c.target_accuracy = 0.85;
  line = outcome_line("c", build_summary(cls.path(), c));
  CHECK(line.find("; final test accuracy 90.00%;") != std::string::npos);
  CHECK(line.find("; target 85.0% reached (every region by 1.0 s)") != std::string::npos);
}

TEST_CASE("sweep results add the final validation bpb and its delta against the baseline") {
  test::TempDir tmp("lm-sweep-table");
  std::ofstream(tmp.path() / "base.yaml") << "regions: [a]\nmodel: {kind: gpt}\n";
  const auto plan = parse_sweep("base: base.yaml\ngrid: {worker.local_steps: [8, 32]}\n", "s.yaml",
                                tmp.path(), "s");
  json base{{"status", "completed"},    {"model", "gpt"},        {"final_test_accuracy", nullptr},
            {"final_val_bpb", 2.5},     {"final_val_loss", 1.7}, {"wall_seconds", 30.0},
            {"wan_bytes_total", 1000.0}};
  json other = base;
  other["final_val_bpb"] = 2.3;
  other["wan_bytes_total"] = 250.0;
  const std::vector<SweepRow> rows{{&plan.points[0], base, "/r/0"},
                                   {&plan.points[1], other, "/r/1"}};
  const auto csv = results_csv(plan, rows);
  CHECK(csv.find("label,worker.local_steps,status,final_test_accuracy,accuracy_delta_pp,"
                 "time_to_target_seconds,wall_seconds,wan_bytes_total,wan_reduction,speedup,"
                 "baseline,run_dir,final_val_bpb,val_bpb_delta,wan_profile,wan_over_lan\n") == 0);
  // (one region: no WAN profile, no wan_over_lan)
  CHECK(csv.find("local_steps=32,32,completed,,,,30,250,0.75,1,,/r/1,2.3,-0.2,,\n") !=
        std::string::npos);
  CHECK(csv.find("local_steps=8,8,completed,,,,30,1000,0,1,yes,/r/0,2.5,0,,\n") !=
        std::string::npos);
  const auto md = results_markdown(plan, rows);
  CHECK(md.find("| status | val bpb | delta (bpb) | time to target (s) |") != std::string::npos);
  CHECK(md.find("| local_steps=32 | 32 | completed | 2.300 | -0.200 | - | 30.0 | 250 | 75.00% |") !=
        std::string::npos);

  // A classifier sweep keeps its accuracy columns and leaves the bpb ones empty.
  json acc{{"status", "completed"}, {"final_test_accuracy", 0.8}, {"final_val_bpb", nullptr}};
  const std::vector<SweepRow> cls{{&plan.points[0], acc, "/r/0"}, {&plan.points[1], acc, "/r/1"}};
  CHECK(results_csv(plan, cls).find(",/r/1,,,,\n") != std::string::npos);
  CHECK(results_markdown(plan, cls).find("| status | accuracy | delta (pp) |") !=
        std::string::npos);
}

TEST_CASE("the plot script draws loss and validation bpb for a language-model run") {
  test::TempDir tmp("lm-plots");
  write_lm_run(tmp.path());
  run_plot_script("plot_run.py", tmp.path());
  for (const char* name : {"loss_accuracy_vs_time.png", "loss_accuracy_vs_wan_bytes.png"}) {
    CAPTURE(name);
    const auto bytes = png(tmp.path() / name);
    CHECK(bytes.find("validation bits per byte") != std::string::npos);
    CHECK(bytes.find("test accuracy") == std::string::npos);
  }
  png(tmp.path() / "staleness_histogram.png");
  png(tmp.path() / "round_time_split.png");
  CHECK(read(tmp.path() / "plots.log").find("validation bpb") != std::string::npos);
}

TEST_CASE("the sweep plot script draws validation bpb curves for a language-model sweep") {
  test::TempDir tmp("lm-sweep-plots");
  std::ofstream(tmp.path() / "base.yaml") << "regions: [a]\nmodel: {kind: gpt}\n";
  const auto plan = parse_sweep("base: base.yaml\ngrid: {worker.local_steps: [8, 32]}\n", "s.yaml",
                                tmp.path(), "s");
  std::vector<SweepRow> rows;
  for (const auto& p : plan.points) {
    const auto run = tmp.path() / "runs" / p.label;
    fs::create_directories(run);
    write_lm_run(run);
    rows.push_back({&p, build_summary(run, {}), run});
  }
  std::ofstream(tmp.path() / "results.csv") << results_csv(plan, rows);
  run_plot_script("plot_sweep.py", tmp.path());
  CHECK(png(tmp.path() / "sweep_accuracy_vs_time.png").find("validation bpb") != std::string::npos);
  CHECK(png(tmp.path() / "sweep_accuracy_vs_wan_bytes.png").find("validation bpb") !=
        std::string::npos);
  CHECK(png(tmp.path() / "sweep_bars.png").find("final validation bpb") != std::string::npos);
}
