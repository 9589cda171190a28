#include "launcher/report/run_report.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <map>

#include "compression/codec_schedule.hpp"
#include "core/error.hpp"
#include "core/run_summary_keys.hpp"
#include "launcher/report/jsonl_tail.hpp"
#include "launcher/report/run_summary.hpp"
#include "launcher/report/shipped_measurements.hpp"

namespace geotrain::launcher {

namespace k = summary::field;  // summary.json's keys (core/run_summary.json)

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
  if (s.contains(k::codec_phases) && s[k::codec_phases].is_array() &&
      s[k::codec_phases].size() > 1) {
    out +=
        "\n## Codec phases\n\n| rounds | critical | non-critical | downlink | rounds done | pushed "
        "| pulled |\n|---|---|---|---|---|---|---|\n";
    for (const auto& p : s[k::codec_phases])
      out += fmt::format(
          "| {}-{} | `{}` | `{}` | `{}` | {} | {} | {} |\n", fmt_value(p[k::first_round]),
          p[k::last_round].is_null() ? std::string() : fmt_value(p[k::last_round]),
          fmt_value(p[k::critical_codec]), fmt_value(p[k::noncritical_codec]),
          fmt_value(p[k::downlink_codec]), fmt_value(p[k::rounds]),
          human_bytes(p.value(k::bytes_pushed, 0.0)), human_bytes(p.value(k::bytes_pulled, 0.0)));
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
                      bpb_text(s[k::final_val_bpb]));
    md += fmt::format("| final validation loss (nats per byte) | {} |\n",
                      bpb_text(s[k::final_val_loss]));
  } else {
    md += fmt::format("| final test accuracy | {} |\n", pct(s[k::final_test_accuracy]));
  }
  md += fmt::format("| final figure of | {} |\n",
                    s.value(k::global_model, false)
                        ? "the global model"
                        : "the regions' own parameters (mean): no global model");
  if (s.contains(k::model_file) && s[k::model_file].is_string())
    md += fmt::format("| global model | `{}` |\n", s[k::model_file].get<std::string>());
  md += fmt::format("| wall time | {} s |\n", fmt_value(s[k::wall_seconds]));
  md += fmt::format(
      "| parameter exchange payload, leaders <-> all servers (`wan_bytes_total`) | {} |\n",
      human_bytes(s.value(k::wan_bytes_total, 0.0)));
  if (s.contains("fp32_round_bytes") && s["fp32_round_bytes"].is_number() &&
      s["fp32_round_bytes"].get<double>() > 0) {
    const double rb = s[k::round_bytes].get<double>(), fp = s["fp32_round_bytes"].get<double>();
    md += fmt::format(
        "| the rounds' payload against fp32 for the same exchanges | {} of {} ({:.1f}%, {:.1f}% "
        "less; the flush at the end not counted) |\n",
        human_bytes(rb), human_bytes(fp), 100.0 * rb / fp, 100.0 * (1.0 - rb / fp));
  }
  if (s.contains(k::wan_wire_bytes_total))
    md += fmt::format("| bytes across the WAN (through netsim, both directions) | {} |\n",
                      human_bytes(s[k::wan_wire_bytes_total].get<double>()));
  md += fmt::format("| rounds | {} |\n| steps per worker | {} |\n", fmt_value(s[k::rounds]),
                    fmt_value(s[k::steps]));
  // worker.step_time_ms: the clock is the emulated hardware's only while no step overran it.
  if (s.contains(k::step_overruns))
    md += fmt::format("| steps that overran the emulated step time | {}{} |\n",
                      fmt_value(s[k::step_overruns]),
                      s[k::step_overruns] == 0 ? "" : " (the emulation did not hold for them)");
  md += fmt::format("| compute utilization (forward and backward) | {} |\n",
                    pct(s[k::compute_utilization]));
  if (s.contains(k::optimizer_utilization) && s[k::optimizer_utilization].is_number())
    md += fmt::format("| the optimizer's step, of the same time | {} |\n",
                      pct(s[k::optimizer_utilization]));
  md += fmt::format("| mean staleness | {} |\n", fmt_value(s[k::mean_staleness]));
  const std::string reached_at =
      s.contains(k::time_to_target_seconds) && s[k::time_to_target_seconds].is_number()
          ? fmt::format("{:.1f} s", s[k::time_to_target_seconds].get<double>())
          : std::string("not reached");
  // The run's wall time when the last region met the target, interpolated between its
  // evaluations (RegionState::time_to_target).
  if (s.contains(k::target_accuracy))
    md += fmt::format("| time to {} (run clock, between evaluations) | {} |\n",
                      pct(s[k::target_accuracy]), reached_at);
  if (s.contains(k::target_val_bpb))
    md += fmt::format("| time to {} bpb (run clock, between evaluations) | {} |\n",
                      bpb_text(s[k::target_val_bpb]), reached_at);
  return md;
}

// The faults and restarts, and the regions a server marked dead (empty when there were none).
std::string incidents_tables(const json& s) {
  std::string md;
  if (s.contains(k::faults) && s[k::faults].is_array() && !s[k::faults].empty()) {
    md += fmt::format(
        "\n## Faults and restarts\n\n{} restart(s).\n\n| process | what | at (s) | restarted "
        "in (s) | checkpoint round | training resumed after (s) | rounds redone |\n"
        "|---|---|---|---|---|---|---|\n",
        fmt_value(s.value(k::restarts, json(0))));
    for (const auto& f : s[k::faults])
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", fmt_value(f[k::process]),
                        fmt_value(f[k::status]), fmt_value(f[k::at_s]),
                        f.value(k::restarted, false) ? fmt_value(f[k::restart_seconds])
                                                     : std::string("not restarted"),
                        fmt_value(f[k::restored_round]), fmt_value(f[k::recovery_seconds]),
                        fmt_value(f[k::rounds_lost]));
  }
  if (s.contains(k::regions_marked_dead) && s[k::regions_marked_dead].is_array() &&
      !s[k::regions_marked_dead].empty()) {
    md +=
        "\n## Regions marked dead by a server\n\nA server stops waiting for a region it "
        "has not heard from within `server.dead_after_ms` (or whose first hello has not come "
        "within `server.join_within_ms` of the server's start); its rounds go on without it "
        "until it rejoins (docs/server.md).\n\n| server | region | at (s) | why "
        "|\n|---|---|---|---|\n";
    for (const auto& d : s[k::regions_marked_dead])
      md += fmt::format("| {} | {} | {} | {} |\n", fmt_value(d[k::server]), fmt_value(d[k::region]),
                        fmt_value(d[k::at_s]), fmt_value(d[k::why]));
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
                               s.value(k::status, "?"));
  if (s.contains(k::failure)) md += fmt::format(" ({})", s[k::failure].get<std::string>());
  // A language model is evaluated on validation bits per byte (lower is better), a classifier
  // on test accuracy: each report shows its own model's keys and metrics.
  const bool lm = is_language_model(s) || (config && config_value(config, "model.kind") == "gpt");
  md += settings_table(run_dir, config, lm);
  md += results_table(s, lm);
  md += fmt::format(
      "\n## Per region (each region's own parameters)\n\n"
      "| region | {} | rounds | steps | {}/s | WAN payload | mean staleness | waiting (s) | busy "
      "|\n"
      "|---|---|---|---|---|---|---|---|---|\n",
      lm ? "validation bpb" : "accuracy", lm ? "tokens" : "samples");
  // Each region's own parameters (the final figures of folders from before the global model).
  const auto own = [](const json& r, const char* region_key, const char* final_key) {
    const auto v = r.value(region_key, json(nullptr));
    return v.is_null() ? r.value(final_key, json(nullptr)) : v;
  };
  for (const auto& [name, r] : s[k::per_region].items()) {
    const auto rate = r.value(k::tokens_per_second, json(nullptr));
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", name,
                      lm ? bpb_text(own(r, k::region_val_bpb, k::final_val_bpb))
                         : pct_text(own(r, k::region_test_accuracy, k::final_test_accuracy)),
                      fmt_value(r[k::rounds]), fmt_value(r.value(k::steps, json(nullptr))),
                      rate.is_number() ? fmt::format("{:.0f}", rate.get<double>()) : "-",
                      human_bytes(r.value(k::wan_bytes, 0.0)), fmt_value(r[k::mean_staleness]),
                      fmt_value(r[k::wait_seconds]),
                      pct_text(r.value(k::compute_utilization, json(nullptr))));
  }
  if (config) {
    try {
      md += shipped_measurements_table(
          read_shipped_measurements(YamlReader{(run_dir / "config.yaml").string()}, config["run"]),
          s, lm);
    } catch (const InputError&) {  // checked before the run started; a folder edited since
    }
  }
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
  const auto metric = lm ? s.value(k::final_val_bpb, json(nullptr))
                         : s.value(k::final_test_accuracy, json(nullptr));
  std::string line = fmt::format("run {}: {} in {:.1f} s; {}; parameter exchange {}", run_name,
                                 s.value(k::status, "?"), s.value(k::wall_seconds, 0.0),
                                 lm ? fmt::format("final validation bpb {}", bpb_text(metric))
                                    : fmt::format("final test accuracy {}", pct_text(metric)),
                                 human_bytes(s.value(k::wan_bytes_total, 0.0)));
  if (s.contains(k::wan_wire_bytes_total))
    line +=
        fmt::format(" ({} across the WAN)", human_bytes(s[k::wan_wire_bytes_total].get<double>()));
  if (s.contains(k::restarts) && s[k::restarts].is_number() && s[k::restarts].get<double>() > 0)
    line += fmt::format("; {} restart(s) after faults", s[k::restarts].get<uint64_t>());
  // Reached: the final value meets the target (as for accuracy, the run's end decides).
  std::optional<std::string> target;
  bool reached = false;
  if (s.contains(k::target_accuracy) && s[k::target_accuracy].is_number()) {
    const double t = s[k::target_accuracy].get<double>();
    const auto acc = s.value(k::final_test_accuracy, json(nullptr));
    target = fmt::format("{:.1f}%", 100 * t);
    reached = acc.is_number() && acc.get<double>() >= t;
  } else if (s.contains(k::target_val_bpb) && s[k::target_val_bpb].is_number()) {
    const double t = s[k::target_val_bpb].get<double>();
    const auto bpb = s.value(k::final_val_bpb, json(nullptr));
    target = fmt::format("{:.3f} bpb", t);
    reached = bpb.is_number() && bpb.get<double>() <= t;
  }
  if (target) {
    line += fmt::format("; target {} {}", *target, reached ? "reached" : "NOT reached");
    if (s.contains(k::time_to_target_seconds) && s[k::time_to_target_seconds].is_number())
      line +=
          fmt::format(" (every region by {:.1f} s)", s[k::time_to_target_seconds].get<double>());
  }
  return line;
}

}  // namespace geotrain::launcher
