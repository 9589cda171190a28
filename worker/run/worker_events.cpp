#include "worker/run/worker_events.hpp"

#include <algorithm>

#include "core/metrics_events.hpp"
#include "core/values_hash.hpp"
#include "kernels/ops/threads.hpp"  // blas_config
#include "worker/training/optimizer.hpp"

namespace geotrain::worker {

namespace f = events::field;

nlohmann::json step_event(const std::string& region, const StepFigures& s) {
  nlohmann::json j{{f::region, region}, {f::rank, s.rank},           {f::round, s.round},
                   {f::step, s.step},   {f::compute_s, s.compute_s}, {f::comm_s, s.comm_s}};
  if (s.loss) j[f::loss] = *s.loss;
  if (s.lr) j[f::lr] = *s.lr;
  if (s.grad_norm) j[f::grad_norm] = *s.grad_norm;
  if (s.optimizer_s) j[f::optimizer_s] = *s.optimizer_s;
  if (s.skipped) j[f::skipped] = *s.skipped;
  if (s.overrun) j[f::overrun] = *s.overrun;
  return j;
}

nlohmann::json round_event(const std::string& region, uint64_t round, uint32_t steps,
                           const RoundTimes& t, const nlohmann::json& exchanges) {
  nlohmann::json j{{f::region, region},   {f::round, round},
                   {f::steps, steps},     {f::compute_s, t.compute_s},
                   {f::comm_s, t.comm_s}, {f::optimizer_s, t.optimizer_s},
                   {f::wait_s, t.wait_s}};
  j.update(exchanges);
  return j;
}

nlohmann::json done_event(const std::string& region, uint32_t rank, uint64_t rounds, uint64_t steps,
                          uint64_t skipped_steps, double wall_s) {
  return {{f::region, region},
          {f::rank, rank},
          {f::rounds, rounds},
          {f::steps, steps},
          {f::skipped_steps, skipped_steps},
          {f::wall_s, wall_s}};
}

nlohmann::json exchange_fields(const std::vector<RoundReport>& reports) {
  nlohmann::json j = nlohmann::json::object();
  if (reports.empty()) return j;
  double push = 0, pull = 0, gate = 0, merge_wait = 0;
  uint64_t pushed = 0, pulled = 0, largest = 0, deferred = 0, late = 0, held_for_silent = 0;
  uint32_t staleness = 0;
  for (const auto& r : reports) {
    deferred += r.deferred.size();
    late += r.late_shards;
    held_for_silent += r.held_for_silent;
    largest = std::max(largest, r.bytes_pushed + r.bytes_pulled);
    push += r.push_seconds;
    pull += r.pull_seconds;
    merge_wait += r.merge_wait_seconds;
    pushed += r.bytes_pushed;
    pulled += r.bytes_pulled;
    staleness = std::max(staleness, r.max_staleness);
    gate = std::max(gate, double(r.gate_wait_us) / 1e6);
  }
  j[f::merge_wait_s] = merge_wait;
  j[f::push_s] = push;
  j[f::pull_s] = pull;
  j[f::bytes_pushed] = pushed;
  j[f::bytes_pulled] = pulled;
  j[f::staleness] = staleness;
  j[f::gate_wait_s] = gate;
  j[f::merged_round] = reports.back().round;
  j[f::released_round] = reports.back().released_round;
  j[f::exchanges] = reports.size();
  j[f::largest_exchange_bytes] = largest;
  // Deferred shards (worker.shard_wait_ms): still on the WAN after the round's exchanges, and
  // merged late in them.
  j[f::deferred_shards] = deferred;
  j[f::late_shards] = late;
  j[f::shard_wait_s] = reports.back().shard_wait_seconds;
  j[f::held_for_silent] = held_for_silent;  // deferred at once: held for a silent region
  return j;
}

nlohmann::json report_fields(const RoundReport& r) {
  return {{f::round, r.round},
          {"fragment", r.fragment},
          {f::bytes_pushed, r.bytes_pushed},
          {f::bytes_pulled, r.bytes_pulled},
          {f::push_s, r.push_seconds},
          {f::pull_s, r.pull_seconds},
          {f::merge_wait_s, r.merge_wait_seconds},
          {f::staleness, r.max_staleness},
          {f::gate_wait_s, double(r.gate_wait_us) / 1e6},
          {f::released_round, r.released_round},
          {f::deferred_shards, r.deferred.size()},  // worker.shard_wait_ms: still on the WAN
          {f::late_shards, r.late_shards},          // deferred earlier, merged in this exchange
          {f::shard_wait_s, r.shard_wait_seconds},
          {f::held_for_silent, r.held_for_silent}};
}

nlohmann::json flush_fields(const FlushReport& r) {
  nlohmann::json hashes = nlohmann::json::object();
  for (const auto& [shard, hash] : r.shard_hashes) hashes[std::to_string(shard)] = hash_hex(hash);
  return {{f::bytes_pushed, r.bytes_pushed},
          {f::bytes_pulled, r.bytes_pulled},
          {f::push_s, r.push_seconds},
          {f::pull_s, r.pull_seconds},
          {f::segments_owed, r.segments_owed},
          {f::rejoins, r.rejoins},
          {f::shard_hashes, hashes}};
}

nlohmann::json start_event(const WorkerConfig& c, const std::string& region, uint32_t rank,
                           uint32_t world, const std::string& model, size_t parameters, bool resume,
                           uint64_t generation) {
  // The region's emulated step time (worker.step_time_ms; 0: the machine's own speed).
  const auto emulated = c.step_time_ms.find(region);
  // What one of the region's steps trains on (samples, or a GPT's tokens): the report's
  // per-region tokens/s.
  const uint64_t tokens_per_step =
      c.samples_per_step(region) * (c.model.kind == "gpt" ? c.model.gpt.seq_len : 1);
  return {{f::region, region},
          {f::rank, rank},
          {f::world, world},
          {f::model, model},
          {f::parameters, parameters},
          {f::workers_per_region, c.workers.in(region)},  // this region's
          {f::device, c.device_in(region)},               // this region's
          {f::optimizer, optimizer_kind_name(c.optimizer.kind)},
          {f::lr, c.lr},
          {f::batch_size, c.batch_size.in(region)},  // this region's
          {f::local_steps, c.local_steps},
          {f::rounds, c.rounds},
          {f::critical_codec, c.critical_codec.text()},
          {f::noncritical_codec, c.noncritical_codec.text()},
          {f::overlap, c.overlap},
          {f::overlap_mode, std::string(overlap_mode_name(c.overlap_mode))},
          {f::fragments, c.fragments},
          {f::fragment_delay, c.merge_delay()},
          {f::stream_critical, c.stream_critical},
          {f::shard_wait_ms, c.shard_wait.count()},
          // 0: auto (each server's count is in the log: worker/leader/region_sync.cpp)
          {f::streams_per_server, c.streams_per_server},
          {f::staleness_bound, c.staleness_bound},
          {f::resume, resume},
          {f::generation, generation},
          {f::step_time_ms, emulated == c.step_time_ms.end() ? 0u : emulated->second},
          {f::round_time_ms, c.round_time_ms},  // 0: H steps a round
          {f::tokens_per_step, tokens_per_step},
          // The CPU's BLAS kernels: part of a run's arithmetic (docs/experiments.md, "Reproducing
          // a figure").
          {f::blas, kernels::cpu::blas_config()}};
}

nlohmann::json eval_event(const std::string& region, uint64_t round, uint64_t step) {
  return {{f::region, region}, {f::round, round}, {f::step, step}};
}

nlohmann::json eval_event(const std::string& region, const Evaluation& e, uint64_t round,
                          uint64_t step, uint64_t tokens_per_step) {
  auto j = eval_event(region, round, step);
  j[f::tokens] = step * tokens_per_step;
  if (e.bits_per_byte) {
    j[f::val_loss] = e.loss;
    j[f::val_bpb] = *e.bits_per_byte;
    j[f::val_accuracy] = e.accuracy;
  } else {
    j[f::test_accuracy] = e.accuracy;
    j[f::test_loss] = e.loss;
  }
  return j;
}

nlohmann::json motion_event(const std::string& region, const TensorMotion& motion) {
  auto tensors = nlohmann::json::array();
  for (const auto& row : motion.rows())
    tensors.push_back({{"name", row.name},
                       {"elements", row.elements},
                       {"critical", row.critical},
                       {"relative_update", row.relative_update}});
  return {{f::region, region}, {f::tensors, std::move(tensors)}};
}

nlohmann::json figures_of(const Evaluation& e) {
  if (e.bits_per_byte) return {{f::val_bpb, *e.bits_per_byte}, {f::val_loss, e.loss}};
  return {{f::test_accuracy, e.accuracy}};
}

nlohmann::json end_figures(const nlohmann::json& own, const std::optional<nlohmann::json>& global,
                           const std::string& error) {
  static const std::string names[] = {f::test_accuracy, f::val_bpb, f::val_loss};
  nlohmann::json j{{f::global_model, global.has_value()}};
  for (const auto& name : names) {
    if (own.contains(name) && own[name].is_number()) j["region_" + name] = own[name];
    if (global && global->contains(name) && (*global)[name].is_number())
      j["final_" + name] = (*global)[name];
  }
  if (!global) j[f::global_model_error] = error;
  return j;
}

}  // namespace geotrain::worker
