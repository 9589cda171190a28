#include "launcher/chaos/chaos_plan.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.hpp"
#include "launcher/report/jsonl_tail.hpp"

namespace geotrain::launcher {

namespace fs = std::filesystem;

bool launcher_restarts(std::string_view kind) {
  return std::find(kRestartableKinds.begin(), kRestartableKinds.end(), kind) !=
         kRestartableKinds.end();
}

std::string process_kind(const std::string& process) {
  if (process == "netsim") return "netsim";
  if (process.rfind("server-", 0) == 0) return "server";
  if (process.rfind("worker-", 0) == 0) {
    const auto dash = process.rfind('-');
    return process.substr(dash + 1) == "0" ? "leader" : "worker";
  }
  return "";
}

double parse_duration(const std::string& text, const std::string& what) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = used > 0 ? text.substr(used) : "";
  double scale = 0;
  if (unit.empty() || unit == "s")
    scale = 1;
  else if (unit == "ms")
    scale = 1e-3;
  else if (unit == "m" || unit == "min")
    scale = 60;
  else if (unit == "h")
    scale = 3600;
  GT_REQUIRE(used > 0 && scale > 0 && std::isfinite(value) && value > 0,
             "{} is '{}': must be a positive duration such as 20s, 10m, 1.5h, 250ms or a number "
             "of seconds",
             what, text);
  const double seconds = value * scale;
  // A bound, so that no sum of durations overflows to infinity (1e308h used to).
  GT_REQUIRE(seconds <= 366 * 86400.0, "{} is '{}': longer than a year, the longest taken", what,
             text);
  return seconds;
}

const char* to_string(ChaosFault f) {
  switch (f) {
    case ChaosFault::kill:
      return "kill";
    case ChaosFault::stop:
      return "stop";
    case ChaosFault::partition:
      return "partition";
  }
  return "?";
}

FaultMix parse_fault_mix(const std::string& text) {
  FaultMix m;
  double* parts[] = {&m.kill, &m.stop, &m.partition};
  size_t start = 0;
  bool ok = true;
  for (int i = 0; i < 3 && ok; ++i) {
    const auto end = text.find(':', start);
    if ((end == std::string::npos) != (i == 2)) ok = false;
    const auto piece =
        text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    try {
      size_t used = 0;
      *parts[i] = std::stod(piece, &used);
      ok = ok && used == piece.size() && *parts[i] >= 0 && std::isfinite(*parts[i]);
    } catch (const std::exception&) {
      ok = false;
    }
    start = end + 1;
  }
  GT_REQUIRE(ok && m.kill + m.stop + m.partition > 0,
             "--mix is '{}': must be three weights kill:stop:partition, e.g. 2:1:1 or 1:0:0", text);
  return m;
}

std::vector<PlannedFault> plan_faults(const ScheduleInputs& in) {
  GT_REQUIRE(in.every_s > 0, "the time between faults must be positive, not {}", in.every_s);
  std::mt19937_64 rng(in.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const bool partitions = in.partitions_possible && in.regions.size() >= 2 && in.mix.partition > 0;
  const double total = in.mix.kill + in.mix.stop + (partitions ? in.mix.partition : 0);
  std::vector<PlannedFault> out;
  if (total <= 0) return out;
  double partition_free_from = 0;
  for (double t = in.first_at_s; t < in.horizon_s; t += in.every_s * (0.5 + unit(rng))) {
    PlannedFault f;
    f.at_s = t;
    const double x = unit(rng) * total;
    f.pick = rng();
    if (x < in.mix.kill) {
      f.fault = ChaosFault::kill;
    } else if (x < in.mix.kill + in.mix.stop) {
      f.fault = ChaosFault::stop;
      f.length_s = in.stop_s;
    } else {
      f.fault = ChaosFault::partition;
      f.length_s = in.partition_s;
      const auto n = in.regions.size();
      const auto from = static_cast<size_t>(f.pick % n);
      const auto to = (from + 1 + static_cast<size_t>((f.pick / n) % (n - 1))) % n;
      f.from = in.regions[from];
      f.to = in.regions[to];
      if (t < partition_free_from)
        f.fault = ChaosFault::kill;  // never two at once
      else
        partition_free_from = t + f.length_s;
      if (f.fault == ChaosFault::kill) f.length_s = 0, f.from.clear(), f.to.clear();
    }
    out.push_back(f);
  }
  return out;
}

std::optional<WindowRate> window_rate(const std::vector<ProgressPoint>& timeline,
                                      std::optional<double> until) {
  auto ready = std::find_if(timeline.begin(), timeline.end(),
                            [](const ProgressPoint& p) { return p.rounds >= 1; });
  if (ready == timeline.end()) return std::nullopt;
  WindowRate w;
  w.ready_s = ready->t;
  w.rounds_at_ready = ready->rounds;
  w.end_s = ready->t;
  w.rounds_at_end = ready->rounds;
  for (auto it = ready; it != timeline.end(); ++it) {
    if (until && it->t > *until) break;
    w.rounds_at_end = std::max(w.rounds_at_end, it->rounds);
    w.end_s = it->t;
  }
  if (until && *until > w.ready_s) w.end_s = std::max(w.end_s, *until);
  return w;
}

std::optional<WindowRate> given_rate(const std::vector<ProgressPoint>& timeline, double window_s) {
  const auto whole = window_rate(timeline, std::nullopt);
  if (!whole || whole->window_s() <= window_s) return whole;
  return window_rate(timeline, whole->ready_s + window_s);
}

bool TrainedRounds::finished(const std::string& region, uint64_t round) {
  auto& newest = newest_[region];
  if (round <= newest) return false;
  newest = round;
  ++trained_[region];
  return true;
}

uint64_t TrainedRounds::fewest() const {
  uint64_t fewest = UINT64_MAX;
  for (const auto& r : regions_) {
    auto it = trained_.find(r);
    fewest = std::min(fewest, it == trained_.end() ? 0 : it->second);
  }
  return regions_.empty() ? 0 : fewest;
}

std::vector<ProgressPoint> folder_timeline(const fs::path& run_dir) {
  struct Event {
    double t;
    std::string region;
    uint64_t round;
  };
  std::vector<Event> events;
  std::vector<std::string> regions;
  if (fs::is_directory(run_dir))
    for (const auto& entry : fs::directory_iterator(run_dir)) {
      const auto name = entry.path().filename().string();
      const std::string prefix = "worker-", suffix = "-0.metrics.jsonl";
      if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        continue;
      const auto region = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
      regions.push_back(region);
      for (const auto& e : read_jsonl(entry.path()))
        if (e.value("event", "") == "round" && e.value("steps", 1.0) > 0 && e.contains("time") &&
            e["time"].is_number() && e.contains("round") && e["round"].is_number())
          events.push_back({e["time"].get<double>(), region, e["round"].get<uint64_t>()});
    }
  GT_REQUIRE(!regions.empty(),
             "'{}' is not a run folder with leader metrics "
             "(worker-<region>-0.metrics.jsonl)",
             run_dir.string());
  std::stable_sort(events.begin(), events.end(),
                   [](const Event& a, const Event& b) { return a.t < b.t; });
  TrainedRounds trained(regions);
  std::vector<ProgressPoint> out;
  for (const auto& e : events)
    if (trained.finished(e.region, e.round)) out.push_back({e.t, trained.fewest()});
  return out;
}

std::string links_with_partitions(const YAML::Node& user_links,
                                  const std::vector<PlannedFault>& faults) {
  YAML::Node links(YAML::NodeType::Sequence);
  if (user_links && user_links.IsSequence())
    for (const auto& l : user_links) links.push_back(YAML::Clone(l));
  for (const auto& f : faults) {
    if (f.fault != ChaosFault::partition) continue;
    std::optional<size_t> at;
    for (size_t i = 0; i < links.size() && !at; ++i) {
      const YAML::Node l = links[i];
      if (l.IsMap() && l["from"] && l["to"] && l["from"].as<std::string>() == f.from &&
          l["to"].as<std::string>() == f.to)
        at = i;
    }
    if (!at) {
      YAML::Node fresh(YAML::NodeType::Map);
      fresh["from"] = f.from;
      fresh["to"] = f.to;
      links.push_back(fresh);
      at = links.size() - 1;
    }
    YAML::Node entry = links[*at];
    YAML::Node p(YAML::NodeType::Map);
    p["kind"] = "partition";
    p["at_s"] = f.at_s;
    p["until_s"] = f.at_s + f.length_s;
    entry["faults"].push_back(p);
  }
  YAML::Emitter out;
  out << YAML::Flow << links;
  return out.c_str();
}

}  // namespace geotrain::launcher
