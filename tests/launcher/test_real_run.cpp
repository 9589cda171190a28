// `geotrain run` as a user runs it, end to end with real processes: 2 regions x 1 worker
// training a small MLP on Fashion-MNIST for a few rounds through netsim (us-eu profile), then
// the run folder's summary fields, report and plots. Kept short (a few seconds of training).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <optional>

#include "tests/run_binary.hpp"
#include "tests/temp_dir.hpp"

namespace fs = std::filesystem;

namespace {
using Output = geotrain::test::BinaryOutput;

Output run(const std::string& args) { return geotrain::test::run_binary(args); }

std::vector<nlohmann::json> events(const fs::path& file, const std::string& kind) {
  std::vector<nlohmann::json> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line);
    if (e.value("event", "") == kind) out.push_back(e);
  }
  return out;
}

// The end of a run (docs/training.md, "The end of a run"): every leader flushed and evaluated the
// same global model, which summary.json reports (with each region's own figure beside it), whose
// bytes count in wan_bytes_total, and which model.safetensors holds in export-init's layout.
void check_global_model(const fs::path& dir, const nlohmann::json& s) {
  CHECK(s["global_model"] == true);
  CHECK(s["model_file"] == "model.safetensors");
  double wan = 0;
  std::optional<double> global;
  for (const std::string region : {"us-east", "eu-west"}) {
    CAPTURE(region);
    const auto file = dir / ("worker-" + region + "-0.metrics.jsonl");
    const auto done = events(file, "done");
    REQUIRE(done.size() == 1);
    CHECK(done[0]["global_model"] == true);
    REQUIRE(done[0]["final_test_accuracy"].is_number());
    CHECK(done[0]["region_test_accuracy"].is_number());
    // Every leader evaluated the same model: the same figure, bit for bit.
    if (global) CHECK(done[0]["final_test_accuracy"].get<double>() == *global);
    global = done[0]["final_test_accuracy"].get<double>();
    const auto& r = s["per_region"][region];
    CHECK(r["global_model"] == true);
    CHECK(r["region_test_accuracy"] == done[0]["region_test_accuracy"]);
    const auto flush = events(file, "flush");
    REQUIRE(flush.size() == 1);
    CHECK(flush[0]["global_model"] == true);
    // onebit + int8 with error feedback: the residuals are dropped, not pushed, and the overlap's
    // last exchange pushed every step's progress, so the flush pushes nothing; the global model
    // is pulled in fp32.
    CHECK(flush[0]["bytes_pushed"].get<double>() == 0);
    CHECK(flush[0]["bytes_pulled"].get<double>() >= (784 * 32 + 32 + 32 * 10 + 10) * 4);
    CHECK(r["flush_bytes"].get<double>() ==
          flush[0]["bytes_pushed"].get<double>() + flush[0]["bytes_pulled"].get<double>());
    for (const auto& e : events(file, "round"))
      wan += e.value("bytes_pushed", 0.0) + e.value("bytes_pulled", 0.0);
    wan += r["flush_bytes"].get<double>();
  }
  CHECK(s["final_test_accuracy"].get<double>() == *global);
  CHECK(s["wan_bytes_total"].get<double>() == wan);
  // model.safetensors: [u64 header size][JSON header][fp32 data], as export-init writes it.
  std::ifstream f(dir / "model.safetensors", std::ios::binary);
  REQUIRE(f.good());
  uint64_t header_bytes = 0;
  f.read(reinterpret_cast<char*>(&header_bytes), 8);
  REQUIRE(header_bytes < (1u << 20));
  std::string header(header_bytes, ' ');
  f.read(header.data(), static_cast<std::streamsize>(header_bytes));
  const auto h = nlohmann::json::parse(header);
  CHECK(h["__metadata__"]["format"] == "geotrain");
  CHECK(h["__metadata__"]["arch"] == "784-32-10");
  CHECK(h["__metadata__"]["rounds"] == "6");
  uint64_t elements = 0, end = 0;
  for (const auto& [name, t] : h.items()) {
    if (name == "__metadata__") continue;
    CHECK(t["dtype"] == "F32");
    uint64_t numel = 1;
    for (const auto& d : t["shape"]) numel *= d.get<uint64_t>();
    CHECK(t["data_offsets"][1].get<uint64_t>() - t["data_offsets"][0].get<uint64_t>() == numel * 4);
    elements += numel;
    end = std::max(end, t["data_offsets"][1].get<uint64_t>());
  }
  CHECK(elements == 784 * 32 + 32 + 32 * 10 + 10);
  CHECK(fs::file_size(dir / "model.safetensors") == 8 + header_bytes + end);
}
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
  // The workers' steps time their optimizer step (Adam on the host: some, not all of the time).
  CHECK(s["optimizer_utilization"].get<double>() > 0);
  CHECK(s["optimizer_utilization"].get<double>() < 1);
  CHECK(s["mean_staleness"].is_number());
  CHECK(s["time_to_target_seconds"].is_number());
  check_global_model(dir, s);
  // Each leader measured how far every tensor moved (the tensor_motion event), and `geotrain
  // critical` ranks the tensors from it.
  for (const std::string region : {"us-east", "eu-west"}) {
    const auto motion = events(dir / ("worker-" + region + "-0.metrics.jsonl"), "tensor_motion");
    REQUIRE(motion.size() == 1);
    const auto& tensors = motion[0]["tensors"];
    REQUIRE(tensors.size() == 4);
    for (const auto& t : tensors) {
      CAPTURE(t.dump());
      CHECK(t["relative_update"].get<double>() > 0);
      CHECK(t["critical"] == t["name"].get<std::string>().starts_with("fc2."));
    }
    CHECK(tensors[0]["elements"] == 784 * 32);
  }
  const auto critical = run("critical " + dir.string() + " --lag-share 0.02");
  INFO(critical.text);
  CHECK(critical.code == 0);
  // fc1.weight holds 98.6% of the elements: it stays critical at any share below that.
  CHECK(critical.text.find("  critical: [\"fc1.weight\"") != std::string::npos);
  for (const char* f :
       {"report.md", "config.yaml", "netsim.yaml", "netsim.jsonl", "worker-us-east-0.metrics.jsonl",
        "worker-eu-west-0.metrics.jsonl", "server-us-east.log", "loss_accuracy_vs_time.png",
        "loss_accuracy_vs_wan_bytes.png", "staleness_histogram.png", "round_time_split.png"}) {
    CHECK_MESSAGE(fs::exists(dir / f), f);
    if (fs::exists(dir / f)) CHECK_MESSAGE(fs::file_size(dir / f) > 0, f);
  }
  // The workers' BLAS and its kernels for this CPU, from the leader's start event.
  std::ifstream report(dir / "report.md");
  const std::string md((std::istreambuf_iterator<char>(report)), {});
  CHECK(md.find("| BLAS (the first region's leader) | OpenBLAS ") != std::string::npos);
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
