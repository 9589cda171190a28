#include "launcher/report/run_summary.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "compression/codec_schedule.hpp"
#include "core/error.hpp"
#include "core/run_summary_keys.hpp"
#include "core/yaml_reader.hpp"
#include "launcher/report/fault_log.hpp"
#include "launcher/report/global_model_check.hpp"
#include "launcher/report/jsonl_tail.hpp"
#include "launcher/report/run_report.hpp"

namespace geotrain::launcher {

namespace k = summary::field;  // summary.json's keys (core/run_summary.json)

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

// server.standby: the bytes of the replicas every primary sent its standby (its stats' last
// `standby.replica_bytes`; a restarted server counts from zero again, as netsim does). None when
// no server has a standby.
std::optional<double> standby_bytes(const fs::path& run_dir) {
  std::optional<double> total;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    const auto name = e.path().filename().string();
    if (!name.starts_with("server-") || !name.ends_with(".metrics.jsonl")) continue;
    double last = 0, before_restarts = 0;
    bool any = false;
    for (const auto& r : read_jsonl(e.path())) {
      if (!r.contains("standby") || !r["standby"].is_object() ||
          !r["standby"].contains("replica_bytes") || !r["standby"]["replica_bytes"].is_number())
        continue;
      const double b = r["standby"]["replica_bytes"].get<double>();
      if (b < last) before_restarts += last;
      last = b;
      any = true;
    }
    if (any) total = total.value_or(0) + last + before_restarts;
  }
  return total;
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
    json phase = {{k::first_round, lo},
                  {k::last_round, hi ? json(*hi) : json(nullptr)},
                  {k::critical_codec, s.critical.codec_at(lo)},
                  {k::noncritical_codec, s.noncritical.codec_at(lo)},
                  {k::downlink_codec, s.downlink.codec_at(lo)},
                  {k::rounds, rounds},
                  {k::bytes_pushed, pushed},
                  {k::bytes_pulled, pulled},
                  {k::wan_bytes, pushed + pulled}};
    if (!s.downlink_for.empty()) {
      json per = json::object();
      for (const auto& [region, d] : s.downlink_for) per[region] = d.codec_at(lo);
      phase[k::downlink_codecs] = per;
    }
    out.push_back(std::move(phase));
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
      out.push_back({{k::server, process.substr(std::string("server-").size())},
                     {k::region, e.value("region", "")},
                     {k::at_s, t + offset},
                     {k::why, e.value("why", "")}});
    }
  }
  return out;
}

// One region's entry of per_region: final_* of the global model when the region had it, else
// its own figures (acc, bpb, loss: its final ones, else its newest evaluation).
json region_summary(const RegionState& r, std::optional<double> acc, std::optional<double> bpb,
                    std::optional<double> loss) {
  const bool global = r.final_accuracy || r.final_val_bpb;
  json out = {
      {k::final_test_accuracy, opt(global ? r.final_accuracy : acc)},
      {k::final_val_bpb, opt(global ? r.final_val_bpb : bpb)},
      {k::final_val_loss, opt(global ? r.final_val_loss : loss)},
      {k::region_test_accuracy, opt(acc)},
      {k::region_val_bpb, opt(bpb)},
      {k::region_val_loss, opt(loss)},
      {k::global_model, r.global_model ? json(*r.global_model) : json(nullptr)},
      {k::flush_bytes, r.flush_bytes},
      {k::skipped_steps, r.skipped_steps},
      {k::rounds, r.rounds_done},
      {k::wan_bytes, r.wan_bytes()},
      {k::bytes_pushed, r.bytes_pushed},
      {k::bytes_pulled, r.bytes_pulled},
      {k::mean_staleness,
       r.staleness_n ? json(r.staleness_sum / static_cast<double>(r.staleness_n)) : json(nullptr)},
      {k::wait_seconds, r.wait_s},
      {k::time_to_target_seconds, opt(r.time_to_target)}};
  if (r.emulated) out[k::step_overruns] = r.step_overruns;  // worker.step_time_ms
  return out;
}

// Each region's own activity in `per_region` (its regions only): how busy its (real or emulated)
// hardware was, the figure an uneven fleet is judged by, and its leader's steps (time-budgeted
// rounds: they differ by region) and tokens/s. Emulated hardware (worker.step_time_ms) is busy for
// the whole emulated step, its AllReduce and optimizer included; real hardware for its forward and
// backward.
void add_region_activity(const RunMonitor& monitor, json& per_region) {
  std::map<std::string, std::pair<double, double>> busy;  // compute, wall of its workers
  for (const auto& [id, w] : monitor.workers()) {
    const auto region = monitor.regions().find(id.first);
    const bool emulated = region != monitor.regions().end() && region->second.emulated;
    busy[id.first].first += w.compute_s + (emulated ? w.comm_s + w.optimizer_s.value_or(0) : 0.0);
    busy[id.first].second += w.wall_s.value_or(w.last_time);
  }
  for (const auto& [region, b] : busy)
    if (per_region.contains(region))
      per_region[region][k::compute_utilization] =
          b.second > 0 ? json(std::min(1.0, b.first / b.second)) : json(nullptr);
  for (const auto& [id, w] : monitor.workers()) {
    if (id.second != 0 || !per_region.contains(id.first)) continue;
    const auto& r = monitor.regions().at(id.first);
    const double wall = w.wall_s.value_or(w.last_time);
    per_region[id.first][k::steps] = w.steps;
    per_region[id.first][k::tokens_per_second] =
        r.tokens_per_step > 0 && wall > 0
            ? json(static_cast<double>(w.steps) * r.tokens_per_step / wall)
            : json(nullptr);
  }
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

namespace {
void drop_nulls(nlohmann::json& j) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end();) {
      if (it->is_null()) {
        it = j.erase(it);
      } else {
        drop_nulls(*it);
        ++it;
      }
    }
  } else if (j.is_array()) {
    for (auto& e : j) drop_nulls(e);
  }
}
}  // namespace

std::optional<nlohmann::json> read_summary(const std::filesystem::path& run_dir) {
  std::ifstream in(run_dir / "summary.json");
  if (!in) return std::nullopt;
  auto summary = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!summary.is_object()) return std::nullopt;
  drop_nulls(summary);
  return summary;
}

bool is_language_model(const json& s) {
  return s.is_object() && (s.value(k::model, "") == "gpt" ||
                           (s.contains(k::final_val_bpb) && s[k::final_val_bpb].is_number()));
}

json build_summary(const fs::path& run_dir, const SummaryInputs& in) {
  const auto monitor = read_run_metrics(run_dir, in.target());
  json s;
  s[k::status] = in.status;
  if (!in.failure.empty()) s[k::failure] = in.failure;
  if (!monitor.model().empty()) s[k::model] = monitor.model();
  s[k::regions] = monitor.regions().size();
  s[k::workers] = monitor.workers().size();

  // final_*: the global model's, as the leaders that had it evaluated it (the same model: the
  // same figure); a run without one (its flush failed, or a folder from before it) reports the
  // mean of the regions' own figures, as runs always did.
  RegionMean accuracy, val_bpb, val_loss, global_accuracy, global_val_bpb, global_val_loss;
  double wan = 0, staleness_sum = 0, round_events = 0;
  uint64_t rounds = 0, skipped_steps = 0;
  std::optional<uint64_t> step_overruns;  // with an emulated step time in some region
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
    if (r.emulated) step_overruns = step_overruns.value_or(0) + r.step_overruns;
    staleness_sum += r.staleness_sum;
    round_events += static_cast<double>(r.staleness_n);
    rounds = std::max(rounds, r.rounds_done);
    if (r.time_to_target)
      time_to_target = std::max(time_to_target, *r.time_to_target);
    else
      all_reached = false;
    per_region[name] = region_summary(r, acc, bpb, loss);
  }
  uint64_t steps = 0;
  double compute = 0, worker_wall = 0, slowest = 0;
  std::optional<double> optimizer;  // none when no worker's steps report it
  for (const auto& [id, w] : monitor.workers()) {
    steps = std::max(steps, w.steps);
    compute += w.compute_s;
    if (w.optimizer_s) optimizer = optimizer.value_or(0) + *w.optimizer_s;
    const double wall = w.wall_s.value_or(w.last_time);
    worker_wall += wall;
    slowest = std::max(slowest, wall);
  }
  add_region_activity(monitor, per_region);
  const bool global = global_accuracy.n > 0 || global_val_bpb.n > 0;
  s[k::final_test_accuracy] = global ? global_accuracy.value() : accuracy.value();
  s[k::final_val_bpb] = global ? global_val_bpb.value() : val_bpb.value();
  s[k::final_val_loss] = global ? global_val_loss.value() : val_loss.value();
  s[k::global_model] = global;
  // Every copy of the global model the run ended with, compared bit for bit (hashes).
  std::vector<std::string> names;
  for (const auto& [name, r] : monitor.regions()) names.push_back(name);
  const auto same = check_global_model(run_dir, names);
  s[k::global_model_identical] = same.identical ? json(*same.identical) : json(nullptr);
  s[k::global_model_check] = same.detail;
  // Written by the first region's leader (worker/run/final_model.hpp, global_model_path).
  s[k::model_file] =
      fs::exists(run_dir / "model.safetensors") ? json("model.safetensors") : json(nullptr);
  s[k::wall_seconds] = in.wall_seconds.value_or(slowest);
  s[k::wan_bytes_total] = wan;
  // Bytes per codec phase, from the run folder's config (none when it cannot be read).
  try {
    if (fs::exists(run_dir / "config.yaml"))
      s[k::codec_phases] =
          codec_phases(run_schedules(YAML::LoadFile((run_dir / "config.yaml").string())), monitor);
  } catch (const YAML::Exception&) {
  } catch (const InputError&) {
  }
  if (auto b = netsim_bytes(run_dir / "netsim.jsonl")) s[k::wan_wire_bytes_total] = *b;
  if (auto b = standby_bytes(run_dir)) s[k::standby_bytes] = *b;
  s[k::rounds] = rounds;
  s[k::steps] = steps;
  s[k::skipped_steps] = skipped_steps;
  if (step_overruns)
    s[k::step_overruns] = *step_overruns;  // worker.step_time_ms  // the anomaly guard's, summed
                                           // over regions' leaders
  s[k::compute_utilization] =
      worker_wall > 0 ? json(std::min(1.0, compute / worker_wall)) : json(nullptr);
  s[k::optimizer_utilization] =
      worker_wall > 0 && optimizer ? json(std::min(1.0, *optimizer / worker_wall)) : json(nullptr);
  s[k::mean_staleness] = round_events > 0 ? json(staleness_sum / round_events) : json(nullptr);
  if (in.target_accuracy) s[k::target_accuracy] = *in.target_accuracy;
  if (in.target_val_bpb) s[k::target_val_bpb] = *in.target_val_bpb;
  if (in.target().any())
    s[k::time_to_target_seconds] = all_reached ? json(time_to_target) : json(nullptr);
  s[k::per_region] = per_region;
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
    s[k::round_bytes] = round_bytes;
    s["fp32_round_bytes"] = fp32;
  }
  s[k::regions_marked_dead] = regions_marked_dead(run_dir, process_starts(run_dir));
  // run.restart: what died and how the run recovered (launcher/report/fault_log.hpp).
  const auto faults = fold_faults(read_jsonl(run_dir / "events.jsonl"));
  s[k::restarts] = faults["restarts"];
  s[k::faults] = faults["faults"];
  return s;
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
