// geotrain compare: existing run folders in one table (markdown and CSV) with the settings that
// differ, deltas against the first run, and the plot; bad folders are named.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "core/error.hpp"
#include "launcher/sweep/compare.hpp"
#include "tests/run_binary.hpp"
#include "tests/temp_dir.hpp"

using namespace geotrain;
using namespace geotrain::launcher;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {
// A finished run folder: config.yaml, a leader's metrics with evaluations, summary.json.
// `run_name`: the config's run.name; the folder's name when empty.
fs::path make_run(const fs::path& parent, const std::string& name, const std::string& codec,
                  const json& summary, bool language_model = false,
                  const std::string& run_name = "") {
  const auto dir = parent / name;
  fs::create_directories(dir);
  std::ofstream(dir / "config.yaml")
      << "regions: [a, b]\nmodel: {arch: 784-10}\n"
         "server: {endpoints: {a: 'tcp://127.0.0.1:1', b: 'tcp://127.0.0.1:2'}, run_dir: "
      << dir.string() << "}\nworker: {critical_codec: " << codec
      << ", lr: 0.1, run_dir: " << dir.string()
      << "}\nrun: {name: " << (run_name.empty() ? name : run_name)
      << ", wan_profile: /x/configs/wan/global-3.yaml}\nsecurity: {keys_dir: " << dir.string()
      << "/keys}\n";
  std::ofstream m(dir / "worker-a-0.metrics.jsonl");
  const char* field = language_model ? "val_bpb" : "test_accuracy";
  for (int i = 1; i <= 3; ++i) {
    m << json{{"event", "round"}, {"region", "a"},        {"rank", 0},           {"time", i},
              {"round", i},       {"bytes_pushed", 1000}, {"bytes_pulled", 1000}}
             .dump()
      << "\n";
    m << json{{"event", "eval"}, {"region", "a"}, {"rank", 0}, {"time", i}, {field, 0.2 * i}}.dump()
      << "\n";
  }
  std::ofstream(dir / "summary.json") << summary.dump(2);
  return dir;
}

json classifier(double acc, double ttt, double wall, double bytes) {
  return {{"status", "completed"},         {"model", "mlp"},       {"final_test_accuracy", acc},
          {"time_to_target_seconds", ttt}, {"wall_seconds", wall}, {"wan_bytes_total", bytes}};
}

std::string error_of(const std::vector<fs::path>& dirs) {
  try {
    load_comparison(dirs);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("compare puts run folders in one table with the settings that differ and deltas") {
  test::TempDir tmp("compare");
  const auto a =
      make_run(tmp.path(), "20260101-000000-fp32", "fp32", classifier(0.88, 20, 40, 1e9));
  const auto b =
      make_run(tmp.path(), "20260101-000100-onebit", "onebit", classifier(0.87, 10, 30, 1e8));
  const auto c = load_comparison({a, b});
  REQUIRE(c.runs.size() == 2);
  CHECK_FALSE(c.language_model);
  // Only the codec differs: names, run folders (and paths in them), endpoints are the launcher's.
  CHECK(c.differing_keys == std::vector<std::string>{"worker.critical_codec"});
  CHECK(c.runs[0].settings.at("run.wan_profile") == "global-3");
  CHECK(c.runs[1].label == "20260101-000100-onebit");

  const auto md = comparison_markdown(c);
  CHECK(md.find("| run | `worker.critical_codec` | status | accuracy | delta (pp) |") !=
        std::string::npos);
  CHECK(md.find("| 20260101-000000-fp32 (baseline) | fp32 | completed | 88.00% | +0.00 | 20.0 | "
                "40.0 | 1.00 GB | 0.00% | 1.00x |") != std::string::npos);
  CHECK(md.find("| 20260101-000100-onebit | onebit | completed | 87.00% | -1.00 | 10.0 | 30.0 | "
                "100.00 MB | 90.00% | 2.00x |") != std::string::npos);

  const auto csv = comparison_csv(c);
  CHECK(csv.find("label,worker.critical_codec,status,model,final_test_accuracy,accuracy_delta_pp,"
                 "final_val_bpb") == 0);
  CHECK(csv.find("20260101-000100-onebit,onebit,completed,mlp,0.87,-1,,,,10,30,1e+08,,0.9,2,,") !=
        std::string::npos);
}

TEST_CASE("compare of language models shows validation bpb and loss") {
  test::TempDir tmp("compare-lm");
  const json s1 = {{"status", "completed"},   {"model", "gpt"},      {"final_val_bpb", 2.5},
                   {"final_val_loss", 1.733}, {"wall_seconds", 100}, {"wan_bytes_total", 1e8}};
  json s2 = s1;
  s2["final_val_bpb"] = 2.6;
  const auto a = make_run(tmp.path() / "x", "run", "fp32", s1, true);
  const auto b = make_run(tmp.path() / "y", "run", "onebit", s2, true);
  const auto c = load_comparison({a, b});
  CHECK(c.language_model);
  CHECK(c.runs[0].label == "x/run");  // equal folder names get their parent's
  CHECK(c.runs[1].label == "y/run");
  const auto md = comparison_markdown(c);
  CHECK(md.find("| status | val bpb | val loss | delta (bpb) |") != std::string::npos);
  CHECK(md.find("| y/run | onebit | completed | 2.600 | 1.7330 | +0.100 |") != std::string::npos);
}

TEST_CASE("compare labels runs by their name and lists a run that did not complete unranked") {
  test::TempDir tmp("compare-unranked");
  const auto a = make_run(tmp.path(), "20260101-000000-fp32", "fp32", classifier(0.88, 20, 40, 1e9),
                          false, "fp32");
  // An interrupted run that trained 0 rounds: no accuracy, little traffic, a short wall time.
  json stopped = {
      {"status", "interrupted"}, {"model", "mlp"}, {"wall_seconds", 20}, {"wan_bytes_total", 0}};
  const auto b = make_run(tmp.path(), "20260101-000100-onebit", "onebit", stopped, false, "onebit");
  auto c = load_comparison({a, b});
  CHECK(c.runs[0].label == "fp32");  // the run's name, not its time-stamped folder
  CHECK(c.runs[1].label == "onebit");
  auto md = comparison_markdown(c);
  CHECK(md.find("listed but not ranked") != std::string::npos);
  CHECK(md.find("| onebit | onebit | interrupted, not ranked | - | - | - | 20.0 | 0 B | - | - |") !=
        std::string::npos);
  const auto csv = comparison_csv(c);
  CHECK(csv.find("onebit,onebit,interrupted,mlp,,,,,,,20,0,,,,") != std::string::npos);
  // An interrupted baseline ranks nothing either.
  c = load_comparison({b, a});
  md = comparison_markdown(c);
  CHECK(md.find("| fp32 | fp32 | completed | 88.00% | - | 20.0 | 40.0 | 1.00 GB | - | - |") !=
        std::string::npos);
  // Two runs of one name: their folders tell them apart.
  const auto a2 = make_run(tmp.path(), "20260101-000200-fp32", "fp32",
                           classifier(0.89, 20, 40, 1e9), false, "fp32");
  c = load_comparison({a, a2});
  CHECK(c.runs[0].label == "20260101-000000-fp32");
  CHECK(c.runs[1].label == "20260101-000200-fp32");
}

TEST_CASE(
    "compare names a folder that is missing, not a run folder, unfinished or of another kind") {
  test::TempDir tmp("compare-bad");
  const auto good = make_run(tmp.path(), "good", "fp32", classifier(0.8, 1, 2, 3));
  auto e = error_of({good, tmp.path() / "nowhere"});
  CHECK(e.find(fmt::format("'{}' is not a run folder: no such directory",
                           (tmp.path() / "nowhere").string())) != std::string::npos);
  fs::create_directories(tmp.path() / "empty");
  e = error_of({good, tmp.path() / "empty"});
  CHECK(e.find((tmp.path() / "empty").string() + "' is not a run folder") != std::string::npos);
  fs::create_directories(tmp.path() / "unfinished");
  std::ofstream(tmp.path() / "unfinished" / "config.yaml") << "regions: [a]\n";
  e = error_of({good, tmp.path() / "unfinished"});
  CHECK(e.find((tmp.path() / "unfinished").string() + "' has no summary.json") !=
        std::string::npos);
  std::ofstream(tmp.path() / "unfinished" / "summary.json") << "{not json";
  e = error_of({tmp.path() / "unfinished"});
  CHECK(e.find("summary.json is not a JSON object") != std::string::npos);
  const auto lm =
      make_run(tmp.path(), "lm", "fp32",
               {{"status", "completed"}, {"model", "gpt"}, {"final_val_bpb", 2.5}}, true);
  e = error_of({good, lm});
  CHECK(e.find("compare runs of one kind") != std::string::npos);
}

TEST_CASE("geotrain compare prints the table and writes it, the CSV and the plot") {
  test::TempDir tmp("compare-cli");
  const auto a = make_run(tmp.path(), "a", "fp32", classifier(0.88, 20, 40, 1e9));
  const auto b = make_run(tmp.path(), "b", "onebit", classifier(0.87, 10, 30, 1e8));
  const auto out = tmp.path() / "cmp";
  auto r = test::run_binary("compare " + a.string() + " " + b.string() + " --out " + out.string());
  INFO(r.text);
  REQUIRE(r.code == 0);
  CHECK(r.text.find("| a (baseline) | fp32 | completed | 88.00% |") != std::string::npos);
  CHECK(r.text.find("files in " + out.string()) != std::string::npos);
  for (const char* f : {"compare.md", "compare.csv", "compare.png"})
    CHECK_MESSAGE((fs::exists(out / f) && fs::file_size(out / f) > 0), f);
  CHECK(fs::file_size(out / "compare.png") > 1000);

  r = test::run_binary("compare " + a.string() + " " + (tmp.path() / "nope").string() + " --out " +
                       (tmp.path() / "cmp2").string());
  CHECK(r.code == 2);
  CHECK(r.text.find((tmp.path() / "nope").string() + "' is not a run folder") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp.path() / "cmp2"));
}
