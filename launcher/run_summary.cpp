#include "launcher/run_summary.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "core/error.hpp"
#include "launcher/jsonl_tail.hpp"

namespace geotrain::launcher {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
json opt(std::optional<double> v) { return v ? json(*v) : json(nullptr); }

// Bytes netsim carried: the newest record of each link, forward + reverse.
std::optional<double> netsim_bytes(const fs::path& file) {
  if (!fs::exists(file)) return std::nullopt;
  std::map<std::string, double> per_link;
  for (const auto& r : read_jsonl(file)) {
    const auto link = r.value("link", std::string());
    double b = 0;
    for (const char* lane : {"forward", "reverse"})
      if (r.contains(lane) && r[lane].is_object() && r[lane].contains("bytes") &&
          r[lane]["bytes"].is_number())
        b += r[lane]["bytes"].get<double>();
    per_link[link] = b;
  }
  double total = 0;
  for (const auto& [_, b] : per_link) total += b;
  return total;
}

std::string fmt_value(const json& v) {
  if (v.is_null()) return "-";
  if (v.is_number_float()) return fmt::format("{:.4g}", v.get<double>());
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

// A config value by dotted path, as text ("default" when absent).
std::string config_value(const YAML::Node& root, const std::string& path) {
  YAML::Node n = YAML::Clone(root);
  std::size_t start = 0;
  while (n && start <= path.size()) {
    const auto dot = path.find('.', start);
    const auto key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!n.IsMap() || !n[key]) return "(default)";
    n = n[key];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter e;
  e << YAML::Flow << n;
  return e.c_str();
}
}  // namespace

std::string human_bytes(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.2f} MB", bytes / 1e6);
  if (bytes >= 1e3) return fmt::format("{:.1f} kB", bytes / 1e3);
  return fmt::format("{:.0f} B", bytes);
}

RunMonitor read_run_metrics(const fs::path& run_dir, std::optional<double> target_accuracy) {
  RunMonitor monitor(target_accuracy);
  std::vector<fs::path> files;
  if (fs::is_directory(run_dir))
    for (const auto& entry : fs::directory_iterator(run_dir)) {
      const auto name = entry.path().filename().string();
      if (name.starts_with("worker-") && name.ends_with(".metrics.jsonl"))
        files.push_back(entry.path());
    }
  std::sort(files.begin(), files.end());
  for (const auto& f : files)
    for (const auto& e : read_jsonl(f)) monitor.add(e);
  return monitor;
}

json build_summary(const fs::path& run_dir, const SummaryInputs& in) {
  const auto monitor = read_run_metrics(run_dir, in.target_accuracy);
  json s;
  s["status"] = in.status;
  if (!in.failure.empty()) s["failure"] = in.failure;
  s["regions"] = monitor.regions().size();
  s["workers"] = monitor.workers().size();

  double acc_sum = 0, wan = 0, staleness_sum = 0, round_events = 0;
  int acc_n = 0;
  uint64_t rounds = 0;
  bool all_reached = !monitor.regions().empty();
  double time_to_target = 0;
  json per_region = json::object();
  for (const auto& [name, r] : monitor.regions()) {
    const auto acc = r.final_accuracy ? r.final_accuracy : r.accuracy;
    if (acc) {
      acc_sum += *acc;
      ++acc_n;
    }
    wan += r.wan_bytes();
    staleness_sum += r.staleness_sum;
    round_events += static_cast<double>(r.staleness_n);
    rounds = std::max(rounds, r.rounds_done);
    if (r.time_to_target)
      time_to_target = std::max(time_to_target, *r.time_to_target);
    else
      all_reached = false;
    per_region[name] = {{"final_test_accuracy", opt(acc)},
                        {"rounds", r.rounds_done},
                        {"wan_bytes", r.wan_bytes()},
                        {"bytes_pushed", r.bytes_pushed},
                        {"bytes_pulled", r.bytes_pulled},
                        {"mean_staleness",
                         r.staleness_n ? json(r.staleness_sum / static_cast<double>(r.staleness_n))
                                       : json(nullptr)},
                        {"wait_seconds", r.wait_s},
                        {"time_to_target_seconds", opt(r.time_to_target)}};
  }
  uint64_t steps = 0;
  double compute = 0, worker_wall = 0, slowest = 0;
  for (const auto& [_, w] : monitor.workers()) {
    steps = std::max(steps, w.steps);
    compute += w.compute_s;
    const double wall = w.wall_s.value_or(w.last_time);
    worker_wall += wall;
    slowest = std::max(slowest, wall);
  }
  s["final_test_accuracy"] = acc_n ? json(acc_sum / acc_n) : json(nullptr);
  s["wall_seconds"] = in.wall_seconds.value_or(slowest);
  s["wan_bytes_total"] = wan;
  if (auto b = netsim_bytes(run_dir / "netsim.jsonl")) s["wan_wire_bytes_total"] = *b;
  s["rounds"] = rounds;
  s["steps"] = steps;
  s["compute_utilization"] =
      worker_wall > 0 ? json(std::min(1.0, compute / worker_wall)) : json(nullptr);
  s["mean_staleness"] = round_events > 0 ? json(staleness_sum / round_events) : json(nullptr);
  if (in.target_accuracy) {
    s["target_accuracy"] = *in.target_accuracy;
    s["time_to_target_seconds"] = all_reached ? json(time_to_target) : json(nullptr);
  }
  s["per_region"] = per_region;
  return s;
}

std::string build_report(const fs::path& run_dir, const json& s) {
  YAML::Node config;
  try {
    if (fs::exists(run_dir / "config.yaml"))
      config = YAML::LoadFile((run_dir / "config.yaml").string());
  } catch (const YAML::Exception&) {
  }
  std::string md = fmt::format("# Run {}\n\nStatus: **{}**", run_dir.filename().string(),
                               s.value("status", "?"));
  if (s.contains("failure")) md += fmt::format(" ({})", s["failure"].get<std::string>());
  md += "\n\n## Settings\n\n| setting | value |\n|---|---|\n";
  for (const char* key :
       {"regions", "model.arch", "model.critical", "worker.workers_per_region", "worker.device",
        "worker.batch_size", "worker.local_steps", "worker.rounds", "worker.lr",
        "worker.critical_codec", "worker.noncritical_codec", "worker.overlap",
        "server.staleness_bound", "server.optimizer", "run.wan_profile", "run.target_accuracy"}) {
    std::string v = config ? config_value(config, key) : "?";
    if (std::string(key) == "run.wan_profile" && v != "(default)") v = fs::path(v).stem().string();
    md += fmt::format("| `{}` | {} |\n", key, v);
  }
  md += "\n## Results\n\n| result | value |\n|---|---|\n";
  const auto pct = [](const json& v) {
    return v.is_number() ? fmt::format("{:.2f}%", 100 * v.get<double>()) : "-";
  };
  md += fmt::format("| final test accuracy | {} |\n", pct(s["final_test_accuracy"]));
  md += fmt::format("| wall time | {} s |\n", fmt_value(s["wall_seconds"]));
  md += fmt::format(
      "| parameter exchange payload, leaders <-> all servers (`wan_bytes_total`) | {} |\n",
      human_bytes(s.value("wan_bytes_total", 0.0)));
  if (s.contains("wan_wire_bytes_total"))
    md += fmt::format("| bytes across the WAN (through netsim, both directions) | {} |\n",
                      human_bytes(s["wan_wire_bytes_total"].get<double>()));
  md += fmt::format("| rounds | {} |\n| steps per worker | {} |\n", fmt_value(s["rounds"]),
                    fmt_value(s["steps"]));
  md += fmt::format("| compute utilization | {} |\n", pct(s["compute_utilization"]));
  md += fmt::format("| mean staleness | {} |\n", fmt_value(s["mean_staleness"]));
  if (s.contains("target_accuracy"))
    md += fmt::format("| time to {} | {} |\n", pct(s["target_accuracy"]),
                      s["time_to_target_seconds"].is_number()
                          ? fmt::format("{:.1f} s", s["time_to_target_seconds"].get<double>())
                          : std::string("not reached"));
  md +=
      "\n## Per region\n\n| region | accuracy | rounds | WAN payload | mean staleness | waiting "
      "(s) |\n"
      "|---|---|---|---|---|---|\n";
  for (const auto& [name, r] : s["per_region"].items())
    md += fmt::format("| {} | {} | {} | {} | {} | {} |\n", name, pct(r["final_test_accuracy"]),
                      fmt_value(r["rounds"]), human_bytes(r.value("wan_bytes", 0.0)),
                      fmt_value(r["mean_staleness"]), fmt_value(r["wait_seconds"]));
  bool heading = false;
  for (const char* png : {"loss_accuracy_vs_time.png", "loss_accuracy_vs_wan_bytes.png",
                          "staleness_histogram.png", "round_time_split.png"}) {
    if (!fs::exists(run_dir / png)) continue;
    if (!heading) md += "\n## Plots\n\n";
    heading = true;
    md += fmt::format("![{}]({})\n\n", fs::path(png).stem().string(), png);
  }
  md +=
      "\nFiles: `config.yaml` (resolved config), `*.metrics.jsonl` (per-process metrics), "
      "`netsim.jsonl`, "
      "`*.log` (each process's output); see docs/run.md.\n";
  return md;
}

json write_summary_and_report(const fs::path& run_dir, const SummaryInputs& inputs) {
  auto s = build_summary(run_dir, inputs);
  {
    std::ofstream f(run_dir / "summary.json");
    GT_REQUIRE(f.good(), "cannot write {}", (run_dir / "summary.json").string());
    f << s.dump(2) << "\n";
  }
  std::ofstream f(run_dir / "report.md");
  GT_REQUIRE(f.good(), "cannot write {}", (run_dir / "report.md").string());
  f << build_report(run_dir, s);
  return s;
}

}  // namespace geotrain::launcher
