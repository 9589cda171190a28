// `geotrain run` as a user runs it, end to end with real processes: 2 regions x 1 worker
// training a small MLP on Fashion-MNIST for a few rounds through netsim (us-eu profile), then
// the run folder's summary fields, report and plots. Kept short (a few seconds of training).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>

#include "tests/run_binary.hpp"
#include "tests/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {
using Output = geotrain::test::BinaryOutput;

Output run(const std::string& args) { return geotrain::test::run_binary(args); }
}  // namespace

TEST_CASE("geotrain run trains 2 regions through netsim and leaves summary, report and plots") {
  geotrain::test::TempDir tmp("launcher-real");
  const auto config = tmp.path() / "short.yaml";
  std::ofstream(config)
      << "regions: [us-east, eu-west]\n"
         "model: {arch: \"784-32-10\", critical: [\"fc2.*\"]}\n"
         "server: {staleness_bound: 1}\n"
         "worker: {workers_per_region: 1, batch_size: 32, local_steps: 4, rounds: 6, lr: 0.1,\n"
         "         critical_codec: onebit, noncritical_codec: int8, overlap: true, eval_every: 2}\n"
         "run: {name: short, wan_profile: " GEOTRAIN_SOURCE_DIR
         "/configs/wan/us-eu.yaml,\n"
         "      target_accuracy: 0.3, timeout_s: 120}\n";
  const auto out = run("run " + config.string() + " --out " + (tmp.path() / "runs").string());
  INFO(out.text);
  REQUIRE(out.code == 0);
  CHECK(out.text.find("completed") != std::string::npos);
  std::vector<fs::path> runs;
  for (const auto& e : fs::directory_iterator(tmp.path() / "runs")) runs.push_back(e.path());
  REQUIRE(runs.size() == 1);
  const auto dir = runs[0];

  std::ifstream sf(dir / "summary.json");
  const auto s = nlohmann::json::parse(sf);
  CHECK(s["status"] == "completed");
  CHECK(s["final_test_accuracy"].get<double>() >
        0.3);  // 24 small steps already beat chance (0.1) by far
  CHECK(s["wall_seconds"].get<double>() > 0);
  CHECK(s["wan_bytes_total"].get<double>() > 0);
  // About half the payload goes to the other region's server through netsim.
  CHECK(s["wan_wire_bytes_total"].get<double>() > s["wan_bytes_total"].get<double>() * 0.2);
  CHECK(s["rounds"] == 6);
  CHECK(s["steps"] == 24);
  CHECK(s["compute_utilization"].get<double>() > 0);
  CHECK(s["mean_staleness"].is_number());
  CHECK(s["time_to_target_seconds"].is_number());
  for (const char* f :
       {"report.md", "config.yaml", "netsim.yaml", "netsim.jsonl", "worker-us-east-0.metrics.jsonl",
        "worker-eu-west-0.metrics.jsonl", "server-us-east.log", "loss_accuracy_vs_time.png",
        "loss_accuracy_vs_wan_bytes.png", "staleness_histogram.png", "round_time_split.png"}) {
    CHECK_MESSAGE(fs::exists(dir / f), f);
    if (fs::exists(dir / f)) CHECK_MESSAGE(fs::file_size(dir / f) > 0, f);
  }
}

TEST_CASE("geotrain sweep runs a real two-point sweep and writes the results table and plots") {
  geotrain::test::TempDir tmp("launcher-real-sweep");
  std::ofstream(tmp.path() / "base.yaml")
      << "regions: [us-east, eu-west]\n"
         "model: {arch: \"784-32-10\", critical: [\"fc2.*\"]}\n"
         "worker: {workers_per_region: 1, batch_size: 32, local_steps: 4, rounds: 4, lr: 0.1, "
         "eval_every: 2}\n"
         "run: {wan_profile: " GEOTRAIN_SOURCE_DIR
         "/configs/wan/us-eu.yaml, plots: false, timeout_s: 120}\n";
  std::ofstream(tmp.path() / "two.yaml")
      << "base: base.yaml\ngrid: {worker.noncritical_codec: [fp32, onebit]}\n";
  const auto out = run("sweep " + (tmp.path() / "two.yaml").string() + " --out " +
                       (tmp.path() / "out").string());
  INFO(out.text);
  REQUIRE(out.code == 0);
  const auto dir = tmp.path() / "out" / "two";
  std::ifstream csv_file(dir / "results.csv");
  std::vector<std::string> lines;
  for (std::string l; std::getline(csv_file, l);) lines.push_back(l);
  REQUIRE(lines.size() == 3);
  CHECK(lines[1].find("noncritical_codec=fp32,fp32,completed,") == 0);
  CHECK(lines[2].find("noncritical_codec=onebit,onebit,completed,") == 0);
  // onebit sends less than fp32: wan_reduction (column 8: label, codec, status, accuracy, delta,
  // time to target, wall, WAN bytes, reduction) is well above 0.
  auto cells = [](const std::string& line) {
    std::vector<std::string> cell(1);
    for (char c : line) {
      if (c == ',')
        cell.emplace_back();
      else
        cell.back().push_back(c);
    }
    return cell;
  };
  const auto onebit = cells(lines[2]);
  REQUIRE(onebit.size() > 8);
  CHECK(std::stod(onebit[8]) > 0.3);
  CHECK(cells(lines[1])[9] == "1");  // the baseline's speedup against itself
  for (const char* f : {"results.md", "sweep_accuracy_vs_time.png",
                        "sweep_accuracy_vs_wan_bytes.png", "sweep_bars.png"})
    CHECK_MESSAGE((fs::exists(dir / f) && fs::file_size(dir / f) > 0), f);
}
