#include "launcher/report/run_monitor.hpp"

#include "core/error.hpp"
#include "core/metrics_events.hpp"

namespace geotrain::launcher {

namespace f = events::field;

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

RunMonitor::RunMonitor(RunTarget target) : target_(target) {
  GT_ASSERT(!(target_.accuracy && target_.val_bpb),
            "a run has one target: accuracy {} and val_bpb {} are both set", *target_.accuracy,
            *target_.val_bpb);
}

bool RunMonitor::language_model() const {
  if (model_ == "gpt") return true;
  for (const auto& [_, r] : regions_)
    if (r.val_bpb || r.final_val_bpb || r.region_val_bpb) return true;
  return false;
}

void RunMonitor::add(const nlohmann::json& e, double clock_offset) {
  if (!e.is_object()) return;
  const auto kind = e.value(f::event, std::string());
  const auto region_name = e.value(f::region, std::string());
  if (region_name.empty()) return;
  const auto rank = static_cast<uint32_t>(number_or(e, f::rank, 0));
  const bool leader = rank == 0;
  const double t = number_or(e, f::time, 0);
  auto& region = regions_[region_name];
  auto& worker = workers_[{region_name, rank}];
  if (t > worker.last_time) worker.last_time = t;
  if (leader && t > region.leader_time) region.leader_time = t;

  if (kind == events::name::start) {
    if (auto m = e.find(f::model); model_.empty() && m != e.end() && m->is_string())
      model_ = m->get<std::string>();
    if (leader) {
      if (start_.is_null()) start_ = e;
      region.rounds_planned = number(e, f::rounds);
      region.tokens_per_step = number_or(e, f::tokens_per_step, 0);
    }
    region.emulated = region.emulated || number_or(e, f::step_time_ms, 0) > 0;
  } else if (kind == events::name::step) {
    ++worker.steps;
    worker.compute_s += number_or(e, f::compute_s, 0);
    worker.comm_s += number_or(e, f::comm_s, 0);
    if (auto o = e.find(f::overrun); o != e.end() && o->is_boolean() && o->get<bool>())
      ++region.step_overruns;  // any worker's: each paces its own steps
    if (auto o = number(e, f::optimizer_s))
      worker.optimizer_s = worker.optimizer_s.value_or(0) + *o;
    if (leader) {
      region.step = static_cast<uint64_t>(number_or(e, f::step, static_cast<double>(region.step)));
      region.round = std::max(region.round, static_cast<uint64_t>(number_or(e, f::round, 0)));
      if (auto l = number(e, f::loss)) region.loss = l;
      // The guard decides on the reduced gradient, so the leader's count is the region's.
      if (auto k = e.find(f::skipped); k != e.end() && k->is_boolean() && k->get<bool>())
        ++region.skipped_steps;
    }
  } else if (kind == events::name::round) {
    // With overlap, the exchange still in flight after the last round is reported as one more
    // round event with steps 0: its bytes count, it is not a round of training.
    // A round trained again after a restart (docs/run.md, "Recovery") counts once.
    if (number_or(e, f::steps, 1) > 0 &&
        region.rounds_seen.insert(static_cast<uint64_t>(number_or(e, f::round, 0))).second)
      ++region.rounds_done;
    region.round = std::max(region.round, static_cast<uint64_t>(number_or(e, f::round, 0)));
    region.bytes_pushed += number_or(e, f::bytes_pushed, 0);
    region.bytes_pulled += number_or(e, f::bytes_pulled, 0);
    // By the round of the exchange (merged_round: with overlap, the round before the event's).
    auto& by_round = region.bytes_by_round[static_cast<uint64_t>(
        number_or(e, f::merged_round, number_or(e, f::round, 0)))];
    by_round.first += number_or(e, f::bytes_pushed, 0);
    by_round.second += number_or(e, f::bytes_pulled, 0);
    region.wait_s += number_or(e, f::wait_s, 0);
    if (auto s = number(e, f::staleness)) {
      region.staleness = s;
      region.staleness_sum += *s;
      ++region.staleness_n;
    }
  } else if (kind == events::name::flush) {
    // The end of a run's WAN bytes: residuals pushed, the global model pulled.
    const double pushed = number_or(e, f::bytes_pushed, 0),
                 pulled = number_or(e, f::bytes_pulled, 0);
    region.bytes_pushed += pushed;
    region.bytes_pulled += pulled;
    region.flush_bytes += pushed + pulled;
  } else if (kind == events::name::eval) {
    const auto accuracy = number(e, f::test_accuracy);
    const auto bpb = number(e, f::val_bpb);
    if (accuracy) region.accuracy = accuracy;
    if (bpb) region.val_bpb = bpb;
    if (auto l = number(e, f::val_loss)) region.val_loss = l;
    if (!region.time_to_target && leader) {
      const auto metric = target_.accuracy ? accuracy : bpb;
      const double run_t = t + clock_offset;
      if (target_.reached_by(accuracy, bpb)) {
        region.time_to_target = run_t;
        // Between the evaluation before (which missed) and this one: where the line through the
        // two crosses the target.
        const double goal = target_.accuracy ? *target_.accuracy : *target_.val_bpb;
        if (region.last_eval && metric && *metric != region.last_eval->second) {
          const auto [t0, m0] = *region.last_eval;
          const double f = (goal - m0) / (*metric - m0);
          if (f >= 0 && f <= 1) region.time_to_target = t0 + f * (run_t - t0);
        }
      } else if (metric) {
        region.last_eval = {run_t, *metric};
      }
    }
  } else if (kind == events::name::done) {
    worker.done = true;
    worker.wall_s = number(e, f::wall_s);
    if (auto s = number(e, f::steps)) worker.steps = static_cast<uint64_t>(*s);
    if (leader) {
      const auto global = e.find(f::global_model);
      const bool knows_global = global != e.end() && global->is_boolean();
      // Before the global model, final_* were the region's own figures.
      region.region_accuracy =
          number(e, knows_global ? f::region_test_accuracy : f::final_test_accuracy);
      region.region_val_bpb = number(e, knows_global ? f::region_val_bpb : f::final_val_bpb);
      region.region_val_loss = number(e, knows_global ? f::region_val_loss : f::final_val_loss);
      if (knows_global) {
        region.global_model = global->get<bool>();
        if (auto a = number(e, f::final_test_accuracy)) region.final_accuracy = a;
        if (auto b = number(e, f::final_val_bpb)) region.final_val_bpb = b;
        if (auto l = number(e, f::final_val_loss)) region.final_val_loss = l;
      }
    }
  }
}

}  // namespace geotrain::launcher
