#include "launcher/run_monitor.hpp"

namespace geotrain::launcher {

namespace {
std::optional<double> number(const nlohmann::json& e, const char* key) {
  auto it = e.find(key);
  if (it == e.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}
double number_or(const nlohmann::json& e, const char* key, double fallback) {
  return number(e, key).value_or(fallback);
}
}  // namespace

void RunMonitor::add(const nlohmann::json& e) {
  if (!e.is_object()) return;
  const auto kind = e.value("event", std::string());
  const auto region_name = e.value("region", std::string());
  if (region_name.empty()) return;
  const auto rank = static_cast<uint32_t>(number_or(e, "rank", 0));
  const bool leader = rank == 0;
  const double t = number_or(e, "time", 0);
  auto& region = regions_[region_name];
  auto& worker = workers_[{region_name, rank}];
  if (t > worker.last_time) worker.last_time = t;
  if (leader && t > region.leader_time) region.leader_time = t;

  if (kind == "start") {
    if (leader) {
      if (start_.is_null()) start_ = e;
      region.rounds_planned = number(e, "rounds");
    }
  } else if (kind == "step") {
    ++worker.steps;
    worker.compute_s += number_or(e, "compute_s", 0);
    worker.comm_s += number_or(e, "comm_s", 0);
    if (leader) {
      region.step = static_cast<uint64_t>(number_or(e, "step", static_cast<double>(region.step)));
      region.round = std::max(region.round, static_cast<uint64_t>(number_or(e, "round", 0)));
      if (auto l = number(e, "loss")) region.loss = l;
    }
  } else if (kind == "round") {
    // With overlap, the exchange still in flight after the last round is reported as one more
    // round event with steps 0: its bytes count, it is not a round of training.
    if (number_or(e, "steps", 1) > 0) ++region.rounds_done;
    region.round = std::max(region.round, static_cast<uint64_t>(number_or(e, "round", 0)));
    region.bytes_pushed += number_or(e, "bytes_pushed", 0);
    region.bytes_pulled += number_or(e, "bytes_pulled", 0);
    region.wait_s += number_or(e, "wait_s", 0);
    if (auto s = number(e, "staleness")) {
      region.staleness = s;
      region.staleness_sum += *s;
      ++region.staleness_n;
    }
  } else if (kind == "eval") {
    if (auto a = number(e, "test_accuracy")) {
      region.accuracy = a;
      if (target_ && *a >= *target_ && !region.time_to_target) region.time_to_target = t;
    }
  } else if (kind == "done") {
    worker.done = true;
    worker.wall_s = number(e, "wall_s");
    if (auto s = number(e, "steps")) worker.steps = static_cast<uint64_t>(*s);
    if (leader) {
      if (auto a = number(e, "final_test_accuracy")) region.final_accuracy = a;
    }
  }
}

}  // namespace geotrain::launcher
