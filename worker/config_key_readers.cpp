#include "worker/config_key_readers.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "core/endpoint.hpp"
#include "core/error.hpp"
#include "worker/config.hpp"

namespace geotrain::worker {

std::string worker_key(std::string_view path) { return fmt::format("worker.{}", path); }

// `auto` or a number: the readers of the keys that take either.
bool is_auto(const YAML::Node& n) { return n.IsScalar() && n.Scalar() == "auto"; }

// worker.overlap: false | true | eager | delayed.
void read_overlap(const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
  const std::string text = in.string(n, "worker.overlap");
  if (const auto on = true_or_false(n)) {
    c.overlap_mode = *on ? OverlapMode::carry : OverlapMode::off;
  } else {
    GT_REQUIRE(text == "eager" || text == "delayed",
               "{}: worker.overlap is '{}', allowed: false, true, eager, delayed", in.source(),
               text);
    c.overlap_mode = parse_overlap_mode(text);
  }
  c.overlap = c.overlap_mode != OverlapMode::off;
}

// worker.fragment_delay (after local_steps and overlap).
void read_fragment_delay(const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
  c.fragment_delay = in.number<uint32_t>(n, "worker.fragment_delay", 0, c.local_steps);
  GT_REQUIRE(*c.fragment_delay == 0 || c.overlap,
             "{}: worker.fragment_delay is {} but worker.overlap is false: a delayed merge needs "
             "an overlap mode (true, eager or delayed)",
             in.source(), *c.fragment_delay);
}

// worker.optimizer.kind (after the devices): Muon has no device-resident step.
void read_optimizer_kind(const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
  c.optimizer.kind =
      parse_optimizer_kind(in.choice(n, "worker.optimizer.kind", {"sgd", "adamw", "muon"}));
  GT_REQUIRE(c.optimizer.kind != OptimizerKind::kMuon || !c.devices.any("cuda"),
             "{}: worker.optimizer.kind muon runs on the CPU only (worker.device is {}; the "
             "device-resident step has sgd and adamw)",
             in.source(), c.devices.text());
}

// worker.precision (after the model and the devices).
void read_precision(const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
  c.precision = in.choice(n, "worker.precision", {"fp32", "bf16"});
  GT_REQUIRE(c.precision == "fp32" || c.devices.any("cuda"),
             "{}: worker.precision bf16 needs worker.device cuda (the CPU trains in fp32)",
             in.source());
  GT_REQUIRE(c.precision == "fp32" || c.model.kind == "gpt",
             "{}: worker.precision bf16 is for model.kind gpt (model.kind is {})", in.source(),
             c.model.kind);
}

// worker.zero_stage, and what it cannot run with (after device and elastic).
void read_zero_stage(const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
  c.zero_stage = in.number<uint32_t>(n, "worker.zero_stage", 0, 2);
  if (c.zero_stage == 0) return;
  GT_REQUIRE(!c.devices.any("cuda"),
             "{}: worker.zero_stage {} shards the optimizer state on the CPU only (worker.device "
             "cuda keeps all of it on each GPU)",
             in.source(), c.zero_stage);
  GT_REQUIRE(!c.elastic,
             "{}: worker.zero_stage {} shards the optimizer state over the region's workers, and "
             "a dead worker's shard cannot be taken from a live peer: set worker.elastic: false "
             "(the region then restarts from its snapshots)",
             in.source(), c.zero_stage);
}

// worker.shard_wait_ms: milliseconds or auto (after timeout_ms).
void read_shard_wait(const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
  c.shard_wait_auto = is_auto(n);
  c.shard_wait =
      c.shard_wait_auto
          ? std::min(WorkerConfig::kAutoShardWaitStart, c.timeout / 2)
          : std::chrono::milliseconds(in.number<int64_t>(n, "worker.shard_wait_ms", 0, 86'400'000));
  GT_REQUIRE(c.shard_wait < c.timeout,
             "{}: worker.shard_wait_ms is {}, must be below worker.timeout_ms = {} (after "
             "timeout_ms without an answer a server counts as gone)",
             in.source(), c.shard_wait.count(), c.timeout.count());
}

// worker.slowdowns: [{region, from_s, until_s, factor}], each window inside the run.
void read_slowdowns(const YamlReader& in, const YAML::Node& list, WorkerConfig& c) {
  GT_REQUIRE(list.IsSequence(),
             "{}: worker.slowdowns must be a list of {{region, from_s, until_s, factor}}",
             in.source());
  for (size_t i = 0; i < list.size(); ++i) {
    const auto key = fmt::format("worker.slowdowns[{}]", i);
    const YAML::Node s = list[i];
    GT_REQUIRE(s.IsMap(), "{}: {} must be a map {{region, from_s, until_s, factor}}", in.source(),
               key);
    in.check_keys(s, key, {"region", "from_s", "until_s", "factor"});
    for (const char* k : {"region", "from_s", "until_s", "factor"})
      GT_REQUIRE(s[k], "{}: {}.{} is missing", in.source(), key, k);
    Slowdown d;
    d.region = in.string(s["region"], key + ".region");
    c.region_index(d.region);
    d.from_s = in.number<double>(s["from_s"], key + ".from_s", 0.0, 1e7);
    d.until_s = in.number<double>(s["until_s"], key + ".until_s", 0.0, 1e7);
    GT_REQUIRE(d.from_s < d.until_s, "{}: {}: from_s {} is not before until_s {}", in.source(), key,
               d.from_s, d.until_s);
    d.factor = in.number<double>(s["factor"], key + ".factor", 0.01, 100.0);
    c.slowdowns.push_back(d);
  }
}

std::optional<nlohmann::json> write_slowdowns(const WorkerConfig& c, std::string_view) {
  auto list = nlohmann::json::array();
  for (const auto& s : c.slowdowns)
    list.push_back(
        {{"region", s.region}, {"from_s", s.from_s}, {"until_s", s.until_s}, {"factor", s.factor}});
  return list;
}

// worker.routes: {from: {to: endpoint}}.
void read_routes(const YamlReader& in, const YAML::Node& routes, WorkerConfig& c) {
  GT_REQUIRE(routes.IsMap(), "{}: worker.routes must map a region to {{region: endpoint}}",
             in.source());
  for (const auto& from : routes) {
    const auto a = from.first.as<std::string>();
    c.region_index(a);
    GT_REQUIRE(from.second.IsMap(), "{}: worker.routes.{} must map region names to endpoints",
               in.source(), a);
    for (const auto& to : from.second) {
      const auto b = to.first.as<std::string>();
      c.region_index(b);
      const auto key = fmt::format("worker.routes.{}.{}", a, b);
      c.routes[a][b] = in.string(to.second, key);
      require_endpoint(c.routes[a][b], in.source() + ": " + key);
    }
  }
}

// worker.round_time_ms: milliseconds, or auto: H steps of the fastest region's step_time_ms
// (after local_steps and step_time_ms).
void read_round_time(const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
  if (!is_auto(n)) {
    c.round_time_ms =
        in.number<double>(n, "worker.round_time_ms (milliseconds, 0 or auto)", 0, 86'400'000);
    return;
  }
  GT_REQUIRE(c.step_time_ms.size() == c.regions.size(),
             "{}: worker.round_time_ms auto needs worker.step_time_ms for every region ({} of {} "
             "have one): the round's budget is local_steps of the fastest region's steps",
             in.source(), c.step_time_ms.size(), c.regions.size());
  uint32_t fastest = UINT32_MAX;
  for (const auto& [region, ms] : c.step_time_ms) fastest = std::min(fastest, ms);
  c.round_time_ms = double(fastest) * c.local_steps;
  GT_REQUIRE(c.round_time_ms > 0,
             "{}: worker.round_time_ms auto: a region's worker.step_time_ms is 0", in.source());
}

// worker.max_local_steps (after round_time_ms; its default, 2 x local_steps, is set after the
// table).
void read_max_local_steps(const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
  GT_REQUIRE(c.round_time_ms > 0,
             "{}: worker.max_local_steps bounds time-budgeted rounds: it needs "
             "worker.round_time_ms",
             in.source());
  c.max_local_steps = in.number<uint32_t>(n, "worker.max_local_steps", c.local_steps, 1 << 20);
}

}  // namespace geotrain::worker
