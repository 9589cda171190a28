#include "launcher/report/run_summary.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "compression/codec_schedule.hpp"
#include "core/error.hpp"
#include "core/yaml_reader.hpp"
#include "launcher/report/fault_log.hpp"
#include "launcher/report/jsonl_tail.hpp"

namespace geotrain::launcher {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
json opt(std::optional<double> v) { return v ? json(*v) : json(nullptr); }

// A mean over the regions that have a value; null when none has.
struct RegionMean {
  double sum = 0;
  int n = 0;
  void add(std::optional<double> v) {
    if (!v) return;
    sum += *v;
    ++n;
  }
  json value() const { return n ? json(sum / n) : json(nullptr); }
};

std::string bpb_text(const json& v) {
  return v.is_number() ? fmt::format("{:.3f}", v.get<double>()) : "-";
}
std::string pct_text(const json& v) {
  return v.is_number() ? fmt::format("{:.2f}%", 100 * v.get<double>()) : "-";
}

// Bytes netsim carried: the newest record of each link, forward + reverse. A restarted netsim
// (run.restart) counts from zero again: a count that goes down adds the one before it.
std::optional<double> netsim_bytes(const fs::path& file) {
  if (!fs::exists(file)) return std::nullopt;
  std::map<std::string, double> per_link, before_restarts;
  for (const auto& r : read_jsonl(file)) {
    const auto link = r.value("link", std::string());
    double b = 0;
    for (const char* lane : {"forward", "reverse"})
      if (r.contains(lane) && r[lane].is_object() && r[lane].contains("bytes") &&
          r[lane]["bytes"].is_number())
        b += r[lane]["bytes"].get<double>();
    if (auto it = per_link.find(link); it != per_link.end() && b < it->second)
      before_restarts[link] += it->second;
    per_link[link] = b;
  }
  double total = 0;
  for (const auto& [_, b] : per_link) total += b;
  for (const auto& [_, b] : before_restarts) total += b;
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
// The codec schedules of a run's config (compression/codec_schedule.hpp): each uplink class's,
// the servers' downlink and any region's own downlink. Absent keys are fp32, as the parsers'
// defaults; InputError on a bad schedule.
struct RunSchedules {
  compression::CodecSchedule critical, noncritical, downlink;
  std::map<std::string, compression::CodecSchedule> downlink_for;
};

RunSchedules run_schedules(const YAML::Node& config) {
  const YamlReader in("the run folder's config.yaml");
  RunSchedules out;
  auto section = [&](const char* name) {
    return config.IsMap() && config[name] && config[name].IsMap() ? config[name] : YAML::Node();
  };
  const YAML::Node worker = section("worker"), server = section("server");
  if (worker && worker["critical_codec"])
    out.critical =
        compression::CodecSchedule::parse(in, worker["critical_codec"], "worker.critical_codec");
  if (worker && worker["noncritical_codec"])
    out.noncritical = compression::CodecSchedule::parse(in, worker["noncritical_codec"],
                                                        "worker.noncritical_codec");
  if (server && server["downlink_codec"])
    out.downlink =
        compression::CodecSchedule::parse(in, server["downlink_codec"], "server.downlink_codec");
  if (server && server["downlink_codecs"] && server["downlink_codecs"].IsMap())
    for (const auto& kv : server["downlink_codecs"]) {
      const auto region = kv.first.as<std::string>();
      out.downlink_for.emplace(region, compression::CodecSchedule::parse(
                                           in, kv.second, "server.downlink_codecs." + region));
    }
  return out;
}

// summary.json's codec_phases: the rounds cut wherever some link's schedule switches codecs,
// each span with its codecs and the bytes of the round exchanges in it, summed over regions (the
// flush at the end is in no phase: it is per_region.*.flush_bytes). One span for a run without
// schedules. Rounds are counted from 1; last_round is null for the open-ended last span.
json codec_phases(const RunSchedules& s, const RunMonitor& monitor) {
  std::set<uint64_t> ends;  // last rounds of spans, except the open one
  auto add = [&](const compression::CodecSchedule& schedule) {
    for (const auto& p : schedule.phases())
      if (p.until_round) ends.insert(*p.until_round);
  };
  add(s.critical);
  add(s.noncritical);
  add(s.downlink);
  for (const auto& [_, d] : s.downlink_for) add(d);
  std::vector<std::pair<uint64_t, std::optional<uint64_t>>> spans;
  uint64_t first = 1;
  for (uint64_t end : ends) {
    spans.push_back({first, end});
    first = end + 1;
  }
  spans.push_back({first, std::nullopt});
  json out = json::array();
  for (const auto& [lo, hi] : spans) {
    double pushed = 0, pulled = 0;
    uint64_t rounds = 0;  // the most exchange rounds any region did in the span
    for (const auto& [_, r] : monitor.regions()) {
      uint64_t mine = 0;
      // (The first span takes a round 0 too, should an event claim one: every byte counts once.)
      for (auto it = r.bytes_by_round.lower_bound(lo == 1 ? 0 : lo);
           it != r.bytes_by_round.end() && (!hi || it->first <= *hi); ++it, ++mine) {
        pushed += it->second.first;
        pulled += it->second.second;
      }
      rounds = std::max(rounds, mine);
    }
    json phase = {{"first_round", lo},
                  {"last_round", hi ? json(*hi) : json(nullptr)},
                  {"critical_codec", s.critical.codec_at(lo)},
                  {"noncritical_codec", s.noncritical.codec_at(lo)},
                  {"downlink_codec", s.downlink.codec_at(lo)},
                  {"rounds", rounds},
                  {"bytes_pushed", pushed},
                  {"bytes_pulled", pulled},
                  {"wan_bytes", pushed + pulled}};
    if (!s.downlink_for.empty()) {
      json per = json::object();
      for (const auto& [region, d] : s.downlink_for) per[region] = d.codec_at(lo);
      phase["downlink_codecs"] = per;
    }
    out.push_back(std::move(phase));
  }
  return out;
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
}  // namespace

std::string human_bytes(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.2f} MB", bytes / 1e6);
  if (bytes >= 1e3) return fmt::format("{:.1f} kB", bytes / 1e3);
  return fmt::format("{:.0f} B", bytes);
}

RunMonitor read_run_metrics(const fs::path& run_dir, std::optional<double> target_accuracy) {
  return read_run_metrics(run_dir, RunTarget{target_accuracy, std::nullopt});
}

namespace {
// From events.jsonl: each process's start times on the launcher's clock (the run's), in order:
// the first start, then each restart's. Empty for folders without one.
std::map<std::string, std::vector<double>> process_starts(const fs::path& run_dir) {
  std::map<std::string, std::vector<double>> starts;
  if (!fs::exists(run_dir / "events.jsonl")) return starts;
  for (const auto& e : read_jsonl(run_dir / "events.jsonl"))
    if (e.value("event", "") == "start" && e.contains("process") && e["process"].is_string() &&
        e.contains("time") && e["time"].is_number())
      starts[e["process"].get<std::string>()].push_back(e["time"].get<double>());
  return starts;
}

// The servers' `membership` events that marked a region dead, on the run's clock: a server's
// clock starts at its process's start, and a restarted server (appending to the same file)
// starts again from 0.
json regions_marked_dead(const fs::path& run_dir,
                         const std::map<std::string, std::vector<double>>& starts) {
  json out = json::array();
  if (!fs::is_directory(run_dir)) return out;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    const auto name = entry.path().filename().string();
    if (name.starts_with("server-") && name.ends_with(".metrics.jsonl"))
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    const auto name = f.filename().string();
    const auto process = name.substr(0, name.size() - std::string(".metrics.jsonl").size());
    const auto it = starts.find(process);
    size_t generation = 0;
    double last_t = 0;
    for (const auto& e : read_jsonl(f)) {
      const double t = e.value("t", 0.0);
      if (t < last_t) ++generation;  // a restart: the clock began again
      last_t = t;
      if (e.value("event", "") != "membership" || e.value("change", "") != "dead") continue;
      const double offset =
          it != starts.end() && generation < it->second.size() ? it->second[generation] : 0.0;
      out.push_back({{"server", process.substr(std::string("server-").size())},
                     {"region", e.value("region", "")},
                     {"at_s", t + offset},
                     {"why", e.value("why", "")}});
    }
  }
  return out;
}
}  // namespace

RunMonitor read_run_metrics(const fs::path& run_dir, const RunTarget& target) {
  RunMonitor monitor(target);
  std::vector<fs::path> files;
  if (fs::is_directory(run_dir))
    for (const auto& entry : fs::directory_iterator(run_dir)) {
      const auto name = entry.path().filename().string();
      if (name.starts_with("worker-") && name.ends_with(".metrics.jsonl"))
        files.push_back(entry.path());
    }
  std::sort(files.begin(), files.end());
  const auto starts = process_starts(run_dir);
  for (const auto& f : files) {
    // worker-<region>-<rank>.metrics.jsonl is written by process worker-<region>-<rank>; each
    // of its processes (a restart appends) begins with a `start` line, its clock at 0.
    const auto name = f.filename().string();
    const auto it = starts.find(name.substr(0, name.size() - std::string(".metrics.jsonl").size()));
    size_t generation = 0;
    double offset = 0;
    for (const auto& e : read_jsonl(f)) {
      if (e.value("event", "") == "start" && it != starts.end() && generation < it->second.size())
        offset = it->second[generation++];
      monitor.add(e, offset);
    }
  }
  return monitor;
}

bool is_language_model(const json& s) {
  return s.is_object() && (s.value("model", "") == "gpt" ||
                           (s.contains("final_val_bpb") && s["final_val_bpb"].is_number()));
}

json build_summary(const fs::path& run_dir, const SummaryInputs& in) {
  const auto monitor = read_run_metrics(run_dir, in.target());
  json s;
  s["status"] = in.status;
  if (!in.failure.empty()) s["failure"] = in.failure;
  if (!monitor.model().empty()) s["model"] = monitor.model();
  s["regions"] = monitor.regions().size();
  s["workers"] = monitor.workers().size();

  // final_*: the global model's, as the leaders that had it evaluated it (the same model: the
  // same figure); a run without one (its flush failed, or a folder from before it) reports the
  // mean of the regions' own figures, as runs always did.
  RegionMean accuracy, val_bpb, val_loss, global_accuracy, global_val_bpb, global_val_loss;
  double wan = 0, staleness_sum = 0, round_events = 0;
  uint64_t rounds = 0, skipped_steps = 0;
  bool all_reached = !monitor.regions().empty();
  double time_to_target = 0;
  json per_region = json::object();
  for (const auto& [name, r] : monitor.regions()) {
    // The region's own final figures, else its newest evaluation (a run that stopped early).
    const auto acc = r.region_accuracy ? r.region_accuracy : r.accuracy;
    const auto bpb = r.region_val_bpb ? r.region_val_bpb : r.val_bpb;
    const auto loss = r.region_val_loss ? r.region_val_loss : r.val_loss;
    accuracy.add(acc);
    val_bpb.add(bpb);
    val_loss.add(loss);
    global_accuracy.add(r.final_accuracy);
    global_val_bpb.add(r.final_val_bpb);
    global_val_loss.add(r.final_val_loss);
    wan += r.wan_bytes();
    skipped_steps += r.skipped_steps;
    staleness_sum += r.staleness_sum;
    round_events += static_cast<double>(r.staleness_n);
    rounds = std::max(rounds, r.rounds_done);
    if (r.time_to_target)
      time_to_target = std::max(time_to_target, *r.time_to_target);
    else
      all_reached = false;
    const bool global = r.final_accuracy || r.final_val_bpb;
    per_region[name] = {{"final_test_accuracy", opt(global ? r.final_accuracy : acc)},
                        {"final_val_bpb", opt(global ? r.final_val_bpb : bpb)},
                        {"final_val_loss", opt(global ? r.final_val_loss : loss)},
                        {"region_test_accuracy", opt(acc)},
                        {"region_val_bpb", opt(bpb)},
                        {"region_val_loss", opt(loss)},
                        {"global_model", r.global_model ? json(*r.global_model) : json(nullptr)},
                        {"flush_bytes", r.flush_bytes},
                        {"skipped_steps", r.skipped_steps},
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
  const bool global = global_accuracy.n > 0 || global_val_bpb.n > 0;
  s["final_test_accuracy"] = global ? global_accuracy.value() : accuracy.value();
  s["final_val_bpb"] = global ? global_val_bpb.value() : val_bpb.value();
  s["final_val_loss"] = global ? global_val_loss.value() : val_loss.value();
  s["global_model"] = global;
  // Written by the first region's leader (worker/final_model.hpp, global_model_path).
  s["model_file"] =
      fs::exists(run_dir / "model.safetensors") ? json("model.safetensors") : json(nullptr);
  s["wall_seconds"] = in.wall_seconds.value_or(slowest);
  s["wan_bytes_total"] = wan;
  // Bytes per codec phase, from the run folder's config (none when it cannot be read).
  try {
    if (fs::exists(run_dir / "config.yaml"))
      s["codec_phases"] =
          codec_phases(run_schedules(YAML::LoadFile((run_dir / "config.yaml").string())), monitor);
  } catch (const YAML::Exception&) {
  } catch (const InputError&) {
  }
  if (auto b = netsim_bytes(run_dir / "netsim.jsonl")) s["wan_wire_bytes_total"] = *b;
  s["rounds"] = rounds;
  s["steps"] = steps;
  s["skipped_steps"] = skipped_steps;  // the anomaly guard's, summed over regions' leaders
  s["compute_utilization"] =
      worker_wall > 0 ? json(std::min(1.0, compute / worker_wall)) : json(nullptr);
  s["mean_staleness"] = round_events > 0 ? json(staleness_sum / round_events) : json(nullptr);
  if (in.target_accuracy) s["target_accuracy"] = *in.target_accuracy;
  if (in.target_val_bpb) s["target_val_bpb"] = *in.target_val_bpb;
  if (in.target().any())
    s["time_to_target_seconds"] = all_reached ? json(time_to_target) : json(nullptr);
  s["per_region"] = per_region;
  // The rounds' payload against what fp32 would have moved in the same exchanges: 4 bytes per
  // parameter each way, per region and exchanged round (the flush at the end not counted).
  if (const auto& start = monitor.start_event();
      start.contains("parameters") && start["parameters"].is_number()) {
    const double parameters = start["parameters"].get<double>();
    double round_bytes = 0, fp32 = 0;
    for (const auto& [_, r] : monitor.regions()) {
      for (const auto& [round, b] : r.bytes_by_round) round_bytes += b.first + b.second;
      fp32 += 8.0 * parameters * static_cast<double>(r.bytes_by_round.size());
    }
    s["round_bytes"] = round_bytes;
    s["fp32_round_bytes"] = fp32;
  }
  s["regions_marked_dead"] = regions_marked_dead(run_dir, process_starts(run_dir));
  // run.restart: what died and how the run recovered (launcher/report/fault_log.hpp).
  const auto faults = fold_faults(read_jsonl(run_dir / "events.jsonl"));
  s["restarts"] = faults["restarts"];
  s["faults"] = faults["faults"];
  return s;
}

namespace {
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
  md += fmt::format("| compute utilization | {} |\n", pct(s["compute_utilization"]));
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
                      lm ? bpb_text(own(r, "val_bpb")) : pct(own(r, "test_accuracy")),
                      fmt_value(r["rounds"]), human_bytes(r.value("wan_bytes", 0.0)),
                      fmt_value(r["mean_staleness"]), fmt_value(r["wait_seconds"]));
  md += codec_phase_table(s);
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
        "has not heard from within `server.dead_after_ms`; its rounds go on without it until it "
        "rejoins (docs/server.md).\n\n| server | region | at (s) | why |\n|---|---|---|---|\n";
    for (const auto& d : s["regions_marked_dead"])
      md += fmt::format("| {} | {} | {} | {} |\n", fmt_value(d["server"]), fmt_value(d["region"]),
                        fmt_value(d["at_s"]), fmt_value(d["why"]));
  }
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
