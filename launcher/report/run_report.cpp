#include "launcher/report/run_report.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <map>

#include "compression/codec_schedule.hpp"
#include "launcher/report/jsonl_tail.hpp"
#include "launcher/report/run_summary.hpp"

namespace geotrain::launcher {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
std::string bpb_text(const json& v) {
  return v.is_number() ? fmt::format("{:.3f}", v.get<double>()) : "-";
}
std::string pct_text(const json& v) {
  return v.is_number() ? fmt::format("{:.2f}%", 100 * v.get<double>()) : "-";
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
// report.md's table of codec phases (summary.json's codec_phases): the WAN payload of each;
// empty for a run of one phase.
std::string codec_phase_table(const json& s) {
  std::string out;
  if (s.contains("codec_phases") && s["codec_phases"].is_array() && s["codec_phases"].size() > 1) {
    out +=
        "\n## Codec phases\n\n| rounds | critical | non-critical | downlink | rounds done | pushed "
        "| pulled |\n|---|---|---|---|---|---|---|\n";
    for (const auto& p : s["codec_phases"])
      out += fmt::format(
          "| {}-{} | `{}` | `{}` | `{}` | {} | {} | {} |\n", fmt_value(p["first_round"]),
          p["last_round"].is_null() ? std::string() : fmt_value(p["last_round"]),
          fmt_value(p["critical_codec"]), fmt_value(p["noncritical_codec"]),
          fmt_value(p["downlink_codec"]), fmt_value(p["rounds"]),
          human_bytes(p.value("bytes_pushed", 0.0)), human_bytes(p.value("bytes_pulled", 0.0)));
  }
  return out;
}
// The first leader's `start` event: the settings as its worker read them, defaults included.
json leader_start(const fs::path& run_dir, const YAML::Node& config) {
  if (!config || !config["regions"] || !config["regions"].IsSequence() ||
      config["regions"].size() == 0)
    return json::object();
  const auto file =
      run_dir / fmt::format("worker-{}-0.metrics.jsonl", config["regions"][0].as<std::string>());
  if (!fs::exists(file)) return json::object();
  for (const auto& e : read_jsonl(file))
    if (e.value("event", "") == "start") return e;
  return json::object();
}

// The report's settings: each key's value as the config wrote it, or, where it left the key to
// its default, the value the processes used ("(default)" after it), from the leader's start
// event or the codec and optimizer defaults.
std::string settings_table(const fs::path& run_dir, const YAML::Node& config, bool lm) {
  const json start = leader_start(run_dir, config);
  // Keys whose effective value the leader's start event carries, under its own field name.
  const std::map<std::string, const char*> started = {
      {"worker.workers_per_region", "workers_per_region"},
      {"worker.device", "device"},
      {"worker.optimizer.kind", "optimizer"},
      {"worker.lr", "lr"},
      {"worker.batch_size", "batch_size"},
      {"worker.local_steps", "local_steps"},
      {"worker.rounds", "rounds"},
      {"worker.critical_codec", "critical_codec"},
      {"worker.noncritical_codec", "noncritical_codec"},
      {"worker.overlap", "overlap_mode"},
      {"worker.fragments", "fragments"},
      {"worker.fragment_delay", "fragment_delay"},
      {"server.staleness_bound", "staleness_bound"}};
  std::string md = "\n\n## Settings\n\n| setting | value |\n|---|---|\n";
  for (const char* key : {"regions",
                          "model.kind",
                          lm ? "model.preset" : "model.arch",
                          "model.critical",
                          "worker.workers_per_region",
                          "worker.device",
                          "worker.optimizer.kind",
                          "worker.lr",
                          "worker.batch_size",
                          "worker.local_steps",
                          "worker.rounds",
                          "worker.critical_codec",
                          "worker.noncritical_codec",
                          "server.downlink_codec",
                          "worker.overlap",
                          "worker.fragments",
                          "worker.fragment_delay",
                          "server.staleness_bound",
                          "server.optimizer",
                          "run.wan_profile",
                          lm ? "run.target_val_bpb" : "run.target_accuracy"}) {
    std::string v = config ? config_value(config, key) : "?";
    if (std::string(key) == "run.wan_profile" && v != "(default)") v = fs::path(v).stem().string();
    if (v == "(default)") {
      const auto field = started.find(key);
      if (field != started.end() && start.contains(field->second))
        v = fmt_value(start[field->second]) + " (default)";
      else if (std::string(key) == "server.downlink_codec")
        v = compression::CodecSchedule().text() + " (default)";  // the servers' parser's default
      else if (std::string(key) == "server.optimizer")
        v = std::string(kDefaultOuterOptimizerText) + " (default)";
    }
    md += fmt::format("| `{}` | {} |\n", key, v);
  }
  // The first region's leader's BLAS and the kernels it chose for its CPU: part of the run's
  // arithmetic (docs/experiments.md, "Reproducing a figure").
  if (start.contains("blas") && start["blas"].is_string())
    md += fmt::format("| BLAS (the first region's leader) | {} |\n",
                      start["blas"].get<std::string>());
  return md;
}

// The Results section: the final figure, time, bytes, utilization, staleness, time to target.
std::string results_table(const json& s, bool lm) {
  std::string md;
  md += "\n## Results\n\n| result | value |\n|---|---|\n";
  const auto pct = pct_text;
  if (lm) {
    md += fmt::format("| final validation bits per byte (lower is better) | {} |\n",
                      bpb_text(s["final_val_bpb"]));
    md += fmt::format("| final validation loss (nats per byte) | {} |\n",
                      bpb_text(s["final_val_loss"]));
  } else {
    md += fmt::format("| final test accuracy | {} |\n", pct(s["final_test_accuracy"]));
  }
  md += fmt::format("| final figure of | {} |\n",
                    s.value("global_model", false)
                        ? "the global model"
                        : "the regions' own parameters (mean): no global model");
  if (s.contains("model_file") && s["model_file"].is_string())
    md += fmt::format("| global model | `{}` |\n", s["model_file"].get<std::string>());
  md += fmt::format("| wall time | {} s |\n", fmt_value(s["wall_seconds"]));
  md += fmt::format(
      "| parameter exchange payload, leaders <-> all servers (`wan_bytes_total`) | {} |\n",
      human_bytes(s.value("wan_bytes_total", 0.0)));
  if (s.contains("fp32_round_bytes") && s["fp32_round_bytes"].is_number() &&
      s["fp32_round_bytes"].get<double>() > 0) {
    const double rb = s["round_bytes"].get<double>(), fp = s["fp32_round_bytes"].get<double>();
    md += fmt::format(
        "| the rounds' payload against fp32 for the same exchanges | {} of {} ({:.1f}%, {:.1f}% "
        "less; the flush at the end not counted) |\n",
        human_bytes(rb), human_bytes(fp), 100.0 * rb / fp, 100.0 * (1.0 - rb / fp));
  }
  if (s.contains("wan_wire_bytes_total"))
    md += fmt::format("| bytes across the WAN (through netsim, both directions) | {} |\n",
                      human_bytes(s["wan_wire_bytes_total"].get<double>()));
  md += fmt::format("| rounds | {} |\n| steps per worker | {} |\n", fmt_value(s["rounds"]),
                    fmt_value(s["steps"]));
  md += fmt::format("| compute utilization (forward and backward) | {} |\n",
                    pct(s["compute_utilization"]));
  if (s.contains("optimizer_utilization") && s["optimizer_utilization"].is_number())
    md += fmt::format("| the optimizer's step, of the same time | {} |\n",
                      pct(s["optimizer_utilization"]));
  md += fmt::format("| mean staleness | {} |\n", fmt_value(s["mean_staleness"]));
  const std::string reached_at =
      s.contains("time_to_target_seconds") && s["time_to_target_seconds"].is_number()
          ? fmt::format("{:.1f} s", s["time_to_target_seconds"].get<double>())
          : std::string("not reached");
  // The run's wall time when the last region met the target, interpolated between its
  // evaluations (RegionState::time_to_target).
  if (s.contains("target_accuracy"))
    md += fmt::format("| time to {} (run clock, between evaluations) | {} |\n",
                      pct(s["target_accuracy"]), reached_at);
  if (s.contains("target_val_bpb"))
    md += fmt::format("| time to {} bpb (run clock, between evaluations) | {} |\n",
                      bpb_text(s["target_val_bpb"]), reached_at);
  return md;
}

// The faults and restarts, and the regions a server marked dead (empty when there were none).
std::string incidents_tables(const json& s) {
  std::string md;
  if (s.contains("faults") && s["faults"].is_array() && !s["faults"].empty()) {
    md += fmt::format(
        "\n## Faults and restarts\n\n{} restart(s).\n\n| process | what | at (s) | restarted "
        "in (s) | checkpoint round | training resumed after (s) | rounds redone |\n"
        "|---|---|---|---|---|---|---|\n",
        fmt_value(s.value("restarts", json(0))));
    for (const auto& f : s["faults"])
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", fmt_value(f["process"]),
                        fmt_value(f["status"]), fmt_value(f["at_s"]),
                        f.value("restarted", false) ? fmt_value(f["restart_seconds"])
                                                    : std::string("not restarted"),
                        fmt_value(f["restored_round"]), fmt_value(f["recovery_seconds"]),
                        fmt_value(f["rounds_lost"]));
  }
  if (s.contains("regions_marked_dead") && s["regions_marked_dead"].is_array() &&
      !s["regions_marked_dead"].empty()) {
    md +=
        "\n## Regions marked dead by a server\n\nA server stops waiting for a region it "
        "has not heard from within `server.dead_after_ms` (or whose first hello has not come "
        "within `server.join_within_ms` of the server's start); its rounds go on without it "
        "until it rejoins (docs/server.md).\n\n| server | region | at (s) | why "
        "|\n|---|---|---|---|\n";
    for (const auto& d : s["regions_marked_dead"])
      md += fmt::format("| {} | {} | {} | {} |\n", fmt_value(d["server"]), fmt_value(d["region"]),
                        fmt_value(d["at_s"]), fmt_value(d["why"]));
  }
  return md;
}

}  // namespace

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
  // A language model is evaluated on validation bits per byte (lower is better), a classifier
  // on test accuracy: each report shows its own model's keys and metrics.
  const bool lm = is_language_model(s) || (config && config_value(config, "model.kind") == "gpt");
  md += settings_table(run_dir, config, lm);
  md += results_table(s, lm);
  md += fmt::format(
      "\n## Per region (each region's own parameters)\n\n"
      "| region | {} | rounds | WAN payload | mean staleness | waiting (s) |\n"
      "|---|---|---|---|---|---|\n",
      lm ? "validation bpb" : "accuracy");
  // Each region's own parameters (the final figures of folders from before the global model).
  const auto own = [](const json& r, const char* key) {
    const auto v = r.value(std::string("region_") + key, json(nullptr));
    return v.is_null() ? r.value(std::string("final_") + key, json(nullptr)) : v;
  };
  for (const auto& [name, r] : s["per_region"].items())
    md += fmt::format("| {} | {} | {} | {} | {} | {} |\n", name,
                      lm ? bpb_text(own(r, "val_bpb")) : pct_text(own(r, "test_accuracy")),
                      fmt_value(r["rounds"]), human_bytes(r.value("wan_bytes", 0.0)),
                      fmt_value(r["mean_staleness"]), fmt_value(r["wait_seconds"]));
  md += codec_phase_table(s);
  md += incidents_tables(s);
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

std::string outcome_line(const std::string& run_name, const json& s) {
  const bool lm = is_language_model(s);
  const auto metric =
      lm ? s.value("final_val_bpb", json(nullptr)) : s.value("final_test_accuracy", json(nullptr));
  std::string line = fmt::format("run {}: {} in {:.1f} s; {}; parameter exchange {}", run_name,
                                 s.value("status", "?"), s.value("wall_seconds", 0.0),
                                 lm ? fmt::format("final validation bpb {}", bpb_text(metric))
                                    : fmt::format("final test accuracy {}", pct_text(metric)),
                                 human_bytes(s.value("wan_bytes_total", 0.0)));
  if (s.contains("wan_wire_bytes_total"))
    line +=
        fmt::format(" ({} across the WAN)", human_bytes(s["wan_wire_bytes_total"].get<double>()));
  if (s.contains("restarts") && s["restarts"].is_number() && s["restarts"].get<double>() > 0)
    line += fmt::format("; {} restart(s) after faults", s["restarts"].get<uint64_t>());
  // Reached: the final value meets the target (as for accuracy, the run's end decides).
  std::optional<std::string> target;
  bool reached = false;
  if (s.contains("target_accuracy") && s["target_accuracy"].is_number()) {
    const double t = s["target_accuracy"].get<double>();
    const auto acc = s.value("final_test_accuracy", json(nullptr));
    target = fmt::format("{:.1f}%", 100 * t);
    reached = acc.is_number() && acc.get<double>() >= t;
  } else if (s.contains("target_val_bpb") && s["target_val_bpb"].is_number()) {
    const double t = s["target_val_bpb"].get<double>();
    const auto bpb = s.value("final_val_bpb", json(nullptr));
    target = fmt::format("{:.3f} bpb", t);
    reached = bpb.is_number() && bpb.get<double>() <= t;
  }
  if (target) {
    line += fmt::format("; target {} {}", *target, reached ? "reached" : "NOT reached");
    if (s.contains("time_to_target_seconds") && s["time_to_target_seconds"].is_number())
      line += fmt::format(" (every region by {:.1f} s)", s["time_to_target_seconds"].get<double>());
  }
  return line;
}

}  // namespace geotrain::launcher
