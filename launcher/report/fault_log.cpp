#include "launcher/report/fault_log.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"
#include "core/run_summary_keys.hpp"

namespace geotrain::launcher {

namespace k = summary::field;  // summary.json's keys (core/run_summary.json)

using nlohmann::json;

namespace {
template <typename T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}
template <typename T>
std::optional<T> field(const json& e, const char* key) {
  auto it = e.find(key);
  if (it == e.end() || !it->is_number()) return std::nullopt;
  return it->get<T>();
}
}  // namespace

json Fault::to_json() const {
  return {{k::process, process},
          {k::role, role},
          {k::region, region.empty() ? json(nullptr) : json(region)},
          {k::status, status},
          {k::at_s, at_s},
          {k::restarted, restarted},
          {k::restart, restart},
          {k::restart_seconds, opt(restart_s)},
          {k::recovery_seconds, opt(recovery_s)},
          {k::restored_round, opt(restored_round)},
          {k::rounds_lost, opt(rounds_lost)}};
}

FaultLog::FaultLog(const std::filesystem::path& file) : out_(file, std::ios::app) {
  GT_REQUIRE(out_.good(), "cannot open '{}' for writing", file.string());
}

void FaultLog::write(json event) {
  out_ << event.dump() << '\n';
  out_.flush();
}

void FaultLog::started(double t, const std::string& process, const std::string& role, int pid,
                       uint32_t restart) {
  write({{"time", t},
         {"event", "start"},
         {"process", process},
         {"role", role},
         {"pid", pid},
         {"restart", restart}});
}

size_t FaultLog::fault(double t, const std::string& process, const std::string& role,
                       const std::string& region, const std::string& status, bool will_restart,
                       uint32_t restart) {
  Fault f;
  f.process = process;
  f.role = role;
  f.region = region;
  f.status = status;
  f.at_s = t;
  f.restart = restart;
  faults_.push_back(f);
  write({{"time", t},
         {"event", "fault"},
         {"process", process},
         {"role", role},
         {"region", region.empty() ? json(nullptr) : json(region)},
         {"status", status},
         {"restart", restart},
         {"action", will_restart ? "restart" : "fail"}});
  return faults_.size() - 1;
}

void FaultLog::restarted(size_t i, double t, int pid, std::optional<uint64_t> restored_round) {
  auto& f = faults_.at(i);
  f.restarted = true;
  f.restart_s = t - f.at_s;
  f.restored_round = restored_round;
  json e{{"time", t},  {"event", "restarted"},     {"process", f.process}, {"restart", f.restart},
         {"pid", pid}, {"restart_s", *f.restart_s}};
  if (restored_round) e["restored_round"] = *restored_round;
  write(std::move(e));
}

void FaultLog::recovered(size_t i, double t, std::optional<uint64_t> rounds_lost) {
  auto& f = faults_.at(i);
  f.recovery_s = t - f.at_s;
  f.rounds_lost = rounds_lost;
  json e{{"time", t},
         {"event", "recovered"},
         {"process", f.process},
         {"restart", f.restart},
         {"recovery_s", *f.recovery_s}};
  if (rounds_lost) e["rounds_lost"] = *rounds_lost;
  write(std::move(e));
}

std::string describe_fault(const Fault& f) {
  std::string s = fmt::format("{} {} at {:.1f} s", f.process, f.status, f.at_s);
  if (f.waits)
    return s + (f.recovery_s ? fmt::format(": training resumed after {:.1f} s", *f.recovery_s)
                             : ": waiting for training to resume");
  if (!f.restarted && !f.restart_s) return s + (f.restart > 0 ? ": restarting" : "");
  if (f.restart_s) {
    s += fmt::format(": restarted in {:.1f} s", *f.restart_s);
    if (f.restored_round) s += fmt::format(" (checkpoint of round {})", *f.restored_round);
  }
  if (f.recovery_s)
    s += fmt::format(", training resumed after {:.1f} s", *f.recovery_s);
  else
    s += ", waiting for training to resume";
  if (f.rounds_lost) s += fmt::format(", {} round(s) redone", *f.rounds_lost);
  return s;
}

std::vector<Fault> fold_fault_list(const std::vector<json>& events) {
  std::vector<Fault> faults;
  // The newest fault of a process: restarted / recovered events belong to it.
  const auto newest = [&](const std::string& process) -> Fault* {
    for (auto it = faults.rbegin(); it != faults.rend(); ++it)
      if (it->process == process) return &*it;
    return nullptr;
  };
  for (const auto& e : events) {
    if (!e.is_object()) continue;
    const auto kind = e.value("event", std::string());
    const auto process = e.value("process", std::string());
    const double t = field<double>(e, "time").value_or(0);
    if (kind == "fault") {
      Fault f;
      f.process = process;
      f.role = e.value("role", std::string());
      if (auto r = e.find("region"); r != e.end() && r->is_string()) f.region = *r;
      f.status = e.value("status", std::string());
      f.at_s = t;
      f.restart = field<uint32_t>(e, "restart").value_or(0);
      f.waits = e.value("action", std::string()) == "wait";
      faults.push_back(f);
    } else if (kind == "restarted") {
      if (auto* f = newest(process)) {
        f->restarted = true;
        f->restart_s = field<double>(e, "restart_s");
        f->restored_round = field<uint64_t>(e, "restored_round");
      }
    } else if (kind == "recovered") {
      if (auto* f = newest(process)) {
        f->recovery_s = field<double>(e, "recovery_s");
        f->rounds_lost = field<uint64_t>(e, "rounds_lost");
      }
    }
  }
  return faults;
}

json fold_faults(const std::vector<json>& events) {
  uint64_t restarts = 0;
  for (const auto& e : events)
    if (e.is_object() && e.value("event", std::string()) == "restarted") ++restarts;
  json list = json::array();
  for (const auto& f : fold_fault_list(events)) list.push_back(f.to_json());
  return {{"restarts", restarts}, {"faults", list}};
}

std::vector<std::string> fault_lines(std::vector<Fault> faults, size_t most) {
  std::stable_sort(faults.begin(), faults.end(),
                   [](const Fault& a, const Fault& b) { return a.at_s < b.at_s; });
  std::vector<std::string> out;
  const size_t skip = faults.size() > most ? faults.size() - most : 0;
  if (skip > 0) out.push_back(fmt::format("{} earlier fault(s), in events.jsonl", skip));
  for (size_t i = skip; i < faults.size(); ++i) out.push_back(describe_fault(faults[i]));
  return out;
}

}  // namespace geotrain::launcher
