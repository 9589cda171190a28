#include "worker/config_keys.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <type_traits>
#include <utility>

#include "compression/error_feedback.hpp"
#include "core/error.hpp"
#include "worker/config.hpp"
#include "worker/config_key_readers.hpp"

namespace geotrain::worker {

namespace {

using json = nlohmann::json;
using Written = std::optional<json>;

// A row's writer that writes the field as it is.
template <typename Field>
auto write_field(Field field) {
  return [=](const WorkerConfig& c, std::string_view) -> Written {
    const auto& value = field(c);
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::filesystem::path>)
      return json(value.string());
    else
      return json(value);
  };
}

// A row for a field of WorkerConfig. `field` is an accessor that serves the reader and the writer
// alike, [](auto& c) -> auto& { return c.optimizer.beta1; }; `value(in, node, key)` reads the
// node (key: "worker.<path>", for errors); `write` writes the field back.
template <typename Field, typename ReadValue, typename Write>
WorkerKey field_key(std::string path, Field field, ReadValue value, Write write) {
  const std::string key = worker_key(path);
  return {std::move(path),
          [=](const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
            field(c) = value(in, n, key);
          },
          std::move(write)};
}

template <typename T, typename Field>
WorkerKey number(std::string path, Field field, T lo, T hi) {
  return field_key(
      std::move(path), field,
      [=](const YamlReader& in, const YAML::Node& n, const std::string& key) {
        return in.number<T>(n, key, lo, hi);
      },
      write_field(field));
}

template <typename Field>
WorkerKey boolean(std::string path, Field field) {
  return field_key(
      std::move(path), field,
      [](const YamlReader& in, const YAML::Node& n, const std::string& key) {
        return in.boolean(n, key);
      },
      write_field(field));
}

// A string (or a path).
template <typename Field>
WorkerKey text(std::string path, Field field) {
  return field_key(
      std::move(path), field,
      [](const YamlReader& in, const YAML::Node& n, const std::string& key) {
        return in.string(n, key);
      },
      write_field(field));
}

template <typename Field>
WorkerKey strings(std::string path, Field field) {
  return field_key(
      std::move(path), field,
      [](const YamlReader& in, const YAML::Node& n, const std::string& key) {
        return in.strings(n, key);
      },
      write_field(field));
}

// A key read with the top-level keys (`read` empty), written by `write`.
WorkerKey read_elsewhere(std::string path, decltype(WorkerKey::write) write) {
  return {std::move(path), nullptr, std::move(write)};
}

// An older spelling of another key: read, never written.
WorkerKey older_spelling(std::string path, decltype(WorkerKey::read) read) {
  return {std::move(path), std::move(read),
          [](const WorkerConfig&, std::string_view) -> Written { return std::nullopt; }};
}

// A codec schedule as the YAML writes it: the spec for one phase, else
// [{until_round: N, codec: SPEC}, ..., {codec: SPEC}].
json schedule_json(const compression::CodecSchedule& s) {
  if (!s.scheduled()) return s.phases().front().codec;
  json phases = json::array();
  for (const auto& p : s.phases()) {
    json phase = {{"codec", p.codec}};
    if (p.until_round) phase["until_round"] = *p.until_round;
    phases.push_back(std::move(phase));
  }
  return phases;
}

template <typename Field>
WorkerKey codec(std::string path, Field field) {
  return field_key(
      std::move(path), field,
      [](const YamlReader& in, const YAML::Node& n, const std::string& key) {
        return compression::CodecSchedule::parse(in, n, key);
      },
      [=](const WorkerConfig& c, std::string_view) -> Written { return schedule_json(field(c)); });
}

// worker.step_delay_ms and step_time_ms: {region: ms}.
template <typename Field>
WorkerKey region_milliseconds(std::string path, Field field) {
  const std::string key = worker_key(path);
  return {std::move(path),
          [=](const YamlReader& in, const YAML::Node& d, WorkerConfig& c) {
            GT_REQUIRE(d.IsMap(), "{}: {} must map region names to milliseconds", in.source(), key);
            for (const auto& kv : d) {
              const auto region = kv.first.as<std::string>();
              c.region_index(region);
              field(c)[region] =
                  in.number<uint32_t>(kv.second, fmt::format("{}.{}", key, region), 0, 600'000);
            }
          },
          write_field(field)};
}

std::vector<WorkerKey> data_keys() {
  return {
      {"data.kind",
       [](const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
         c.data.kind = in.choice(n, "worker.data.kind", {"fashion-mnist", "text"});
         c.data.path = c.data.kind == "text" ? DataConfig::kKjvFile : kFashionMnistDir;
       },
       write_field([](auto& c) -> auto& { return c.data.kind; })},
      text(
          "data.path", [](auto& c) -> auto& { return c.data.path; }),
      number(
          "data.validation_fraction", [](auto& c) -> auto& { return c.data.validation_fraction; },
          1e-6, 0.5),
      number(
          "data.eval_windows", [](auto& c) -> auto& { return c.data.eval_windows; }, 1u, 1u << 20),
      older_spelling("data_dir",
                     [](const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
                       c.data.path = in.string(n, "worker.data_dir");
                     }),
  };
}

// The fleet's shape and the device: per-region keys are written as `region`'s.
std::vector<WorkerKey> fleet_keys() {
  return {
      read_elsewhere(
          "workers_per_region",
          [](const WorkerConfig& c, std::string_view r) -> Written { return c.workers.in(r); }),
      read_elsewhere(
          "batch_size",
          [](const WorkerConfig& c, std::string_view r) -> Written { return c.batch_size.in(r); }),
      read_elsewhere(
          "device",
          [](const WorkerConfig& c, std::string_view r) -> Written { return c.device_in(r); }),
      {"precision", read_precision,
       [](const WorkerConfig& c, std::string_view r) -> Written { return c.precision_in(r); }},
      boolean(
          "leader_on_device", [](auto& c) -> auto& { return c.leader_on_device; }),
      boolean(
          "elastic", [](auto& c) -> auto& { return c.elastic; }),
      read_elsewhere("external",  // before the model's checks
                     write_field([](auto& c) -> auto& { return c.external; })),
      number(
          "blas_threads", [](auto& c) -> auto& { return c.blas_threads; }, 1u, 256u),
      number(
          "accumulation_steps", [](auto& c) -> auto& { return c.accumulation_steps; }, 1u, 1024u),
      number(
          "local_steps", [](auto& c) -> auto& { return c.local_steps; }, 1u, 1u << 20),
      number(
          "rounds", [](auto& c) -> auto& { return c.rounds; }, uint64_t{1}, uint64_t{1} << 32),
      number(
          "eval_every", [](auto& c) -> auto& { return c.eval_every; }, uint64_t{0},
          uint64_t{1} << 32),
      number(
          "seed", [](auto& c) -> auto& { return c.seed; }, uint64_t{0}, UINT64_MAX),
  };
}

// The exchange: codecs, error feedback, overlap and streaming.
std::vector<WorkerKey> exchange_keys() {
  return {
      codec(
          "critical_codec", [](auto& c) -> auto& { return c.critical_codec; }),
      codec(
          "noncritical_codec", [](auto& c) -> auto& { return c.noncritical_codec; }),
      {"error_feedback.decay",
       [](const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
         c.error_feedback_decay = in.number<float>(n, "worker.error_feedback.decay", 0.0f, 1.0f);
         compression::require_feedback_decay(c.error_feedback_decay,
                                             in.source() + ": worker.error_feedback.decay");
       },
       write_field([](auto& c) -> auto& { return c.error_feedback_decay; })},
      {"chunk_align",
       [](const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
         c.tensor_segments = in.choice(n, "worker.chunk_align", {"segment", "tensor"}) == "tensor";
       },
       [](const WorkerConfig& c, std::string_view) -> Written {
         return c.tensor_segments ? "tensor" : "segment";
       }},
      {"overlap", read_overlap,
       [](const WorkerConfig& c, std::string_view) -> Written {
         return std::string(overlap_mode_name(c.overlap_mode));
       }},
      read_elsewhere("fragments", write_field([](auto& c) -> auto& { return c.fragments; })),
      read_elsewhere("stream_critical",
                     write_field([](auto& c) -> auto& { return c.stream_critical; })),
      {"fragment_delay", read_fragment_delay,
       [](const WorkerConfig& c, std::string_view) -> Written {  // null: the default
         return c.fragment_delay ? json(*c.fragment_delay) : json(nullptr);
       }},
  };
}

// The inner optimizer (worker/training/optimizer.hpp); which keys go with which kind is checked
// after the table (check_optimizer_keys).
std::vector<WorkerKey> optimizer_keys() {
  return {
      {"optimizer.kind", read_optimizer_kind,
       [](const WorkerConfig& c, std::string_view) -> Written {
         return optimizer_kind_name(c.optimizer.kind);
       }},
      strings(
          "optimizer.no_decay", [](auto& c) -> auto& { return c.optimizer.no_decay; }),
      number(
          "optimizer.momentum", [](auto& c) -> auto& { return c.optimizer.momentum; }, 0.0f,
          0.999999f),
      boolean(
          "optimizer.nesterov", [](auto& c) -> auto& { return c.optimizer.nesterov; }),
      number(
          "optimizer.weight_decay", [](auto& c) -> auto& { return c.optimizer.weight_decay; }, 0.0f,
          1.0f),
      number(
          "optimizer.beta1", [](auto& c) -> auto& { return c.optimizer.beta1; }, 0.0f, 0.999999f),
      number(
          "optimizer.beta2", [](auto& c) -> auto& { return c.optimizer.beta2; }, 0.0f, 0.999999f),
      number(
          "optimizer.eps", [](auto& c) -> auto& { return c.optimizer.eps; }, 1e-12f, 1.0f),
      number(
          "optimizer.muon_lr", [](auto& c) -> auto& { return c.optimizer.muon_lr; }, 1e-9f, 100.0f),
      number(
          "optimizer.muon_momentum", [](auto& c) -> auto& { return c.optimizer.muon_momentum; },
          0.0f, 0.999999f),
      boolean(
          "optimizer.muon_nesterov", [](auto& c) -> auto& { return c.optimizer.muon_nesterov; }),
      number(
          "optimizer.muon_ns_steps", [](auto& c) -> auto& { return c.optimizer.muon_ns_steps; }, 1u,
          100u),
      strings(
          "optimizer.adamw_tensors", [](auto& c) -> auto& { return c.optimizer.adamw_tensors; }),
  };
}

// The learning-rate schedule, its scaling and the step's guards.
std::vector<WorkerKey> schedule_keys() {
  const auto cyclic_only = [](auto get) {
    return [=](const WorkerConfig& c, std::string_view) -> Written {
      if (c.decay != LrDecay::kCyclic) return std::nullopt;
      return json(get(c));
    };
  };
  return {
      number(
          "lr", [](auto& c) -> auto& { return c.lr; }, 1e-9f, 100.0f),
      number(
          "warmup_steps", [](auto& c) -> auto& { return c.warmup_steps; }, uint64_t{0},
          uint64_t{1} << 32),
      number(
          "min_lr", [](auto& c) -> auto& { return c.min_lr; }, 0.0f, 100.0f),
      {"lr_decay",
       [](const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
         const auto kind = in.choice(n, "worker.lr_decay", {"constant", "cosine", "cyclic"});
         c.decay = kind == "cosine"   ? LrDecay::kCosine
                   : kind == "cyclic" ? LrDecay::kCyclic
                                      : LrDecay::kConstant;
       },
       [](const WorkerConfig& c, std::string_view) -> Written {
         return c.decay == LrDecay::kCosine   ? "cosine"
                : c.decay == LrDecay::kCyclic ? "cyclic"
                                              : "constant";
       }},
      {"lr_cycle.period",
       [](const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
         c.lr_cycle_steps = in.number<uint64_t>(n, "worker.lr_cycle.period", 1, uint64_t{1} << 40);
       },
       cyclic_only([](const WorkerConfig& c) { return c.lr_cycle_steps; })},
      {"lr_cycle.multiplier",
       [](const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
         c.lr_cycle_mult = in.number<uint32_t>(n, "worker.lr_cycle.multiplier", 1, 64);
       },
       cyclic_only([](const WorkerConfig& c) { return c.lr_cycle_mult; })},
      older_spelling("scale_lr",
                     [](const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
                       if (in.boolean(n, "worker.scale_lr")) c.lr_scaling = LrScaling::kLinear;
                     }),
      {"lr_scaling",
       [](const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
         const auto kind = in.choice(n, "worker.lr_scaling", {"none", "linear", "sqrt"});
         if (kind != "none") c.lr_scaling = kind == "sqrt" ? LrScaling::kSqrt : LrScaling::kLinear;
       },
       [](const WorkerConfig& c, std::string_view) -> Written {
         if (!c.lr_scaling) return "none";
         return *c.lr_scaling == LrScaling::kSqrt ? "sqrt" : "linear";
       }},
      {"lr_reference_batch",
       [](const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
         GT_REQUIRE(c.lr_scaling.has_value(),
                    "{}: worker.lr_reference_batch is set but the learning rate is not scaled "
                    "(set worker.lr_scaling: linear or sqrt)",
                    in.source());
         c.lr_reference_batch = in.number<uint32_t>(n, "worker.lr_reference_batch", 1, 1u << 30);
       },
       write_field([](auto& c) -> auto& { return c.lr_reference_batch; })},
      number(
          "bucket_cap_mb", [](auto& c) -> auto& { return c.bucket_cap_mb; }, 0.0, 4096.0),
      {"zero_stage", read_zero_stage, write_field([](auto& c) -> auto& { return c.zero_stage; })},
      number(
          "max_grad_norm", [](auto& c) -> auto& { return c.max_grad_norm; }, 0.0, 1e9),
      boolean(
          "anomaly_guard.enabled", [](auto& c) -> auto& { return c.guard.enabled; }),
      number(
          "anomaly_guard.window", [](auto& c) -> auto& { return c.guard.window; }, size_t{2},
          size_t{100000}),
      number(
          "anomaly_guard.k_sigma", [](auto& c) -> auto& { return c.guard.k_sigma; }, 0.1, 1000.0),
      number(
          "anomaly_guard.min_samples", [](auto& c) -> auto& { return c.guard.min_samples; },
          size_t{2}, size_t{100000}),
      number(
          "anomaly_guard.max_consecutive_skips",
          [](auto& c) -> auto& { return c.guard.max_consecutive_skips; }, size_t{0},
          size_t{100000}),
  };
}

// The process: its endpoints, its files, its waits and its server connections.
std::vector<WorkerKey> process_keys() {
  return {
      text(
          "gloo_host", [](auto& c) -> auto& { return c.gloo_host; }),
      {"metrics_port",
       [](const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
         if (is_auto(n))
           c.metrics_port_auto = true;
         else
           c.metrics_port =
               in.number<uint16_t>(n, "worker.metrics_port (a port or auto)", 0, 65535);
       },
       [](const WorkerConfig& c, std::string_view) -> Written {
         return c.metrics_port_auto ? json("auto") : json(c.metrics_port);
       }},
      text(
          "metrics_host", [](auto& c) -> auto& { return c.metrics_host; }),
      text(
          "run_dir", [](auto& c) -> auto& { return c.run_dir; }),
      number(
          "checkpoint.every", [](auto& c) -> auto& { return c.checkpoint.every; }, uint64_t{0},
          uint64_t{1} << 40),
      number(
          "checkpoint.keep", [](auto& c) -> auto& { return c.checkpoint.keep; }, 1u, 1000u),
      text(
          "checkpoint.dir", [](auto& c) -> auto& { return c.checkpoint.dir; }),
      {"timeout_ms",
       [](const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
         c.timeout =
             std::chrono::milliseconds(in.number<int64_t>(n, "worker.timeout_ms", 100, 86'400'000));
       },
       [](const WorkerConfig& c, std::string_view) -> Written { return c.timeout.count(); }},
      {"shard_wait_ms", read_shard_wait,
       [](const WorkerConfig& c, std::string_view) -> Written {
         return c.shard_wait_auto ? json("auto") : json(c.shard_wait.count());
       }},
      {"streams_per_server",  // written as the Python API takes it: 0 for auto
       [](const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
         c.streams_per_server =
             is_auto(n)
                 ? 0
                 : in.number<uint32_t>(n, "worker.streams_per_server (1..64 or auto)", 1, 64);
       },
       write_field([](auto& c) -> auto& { return c.streams_per_server; })},
      number(
          "link_mbps", [](auto& c) -> auto& { return c.link_mbps; }, 1.0, 1e6),
      number(
          "socket_buffer_kib", [](auto& c) -> auto& { return c.socket_buffer_kib; }, 0u, 1u << 20),
  };
}

// Emulation (per-region step times, slowdowns, routes) and time-budgeted rounds.
std::vector<WorkerKey> emulation_keys() {
  return {
      region_milliseconds(
          "step_delay_ms", [](auto& c) -> auto& { return c.step_delay_ms; }),
      region_milliseconds(
          "step_time_ms", [](auto& c) -> auto& { return c.step_time_ms; }),
      {"slowdowns", read_slowdowns, write_slowdowns},
      {"routes", read_routes, write_field([](auto& c) -> auto& { return c.routes; })},
      {"round_time_ms", read_round_time,
       write_field([](auto& c) -> auto& { return c.round_time_ms; })},
      {"max_local_steps", read_max_local_steps,
       write_field([](auto& c) -> auto& { return c.max_local_steps; })},
  };
}

std::vector<WorkerKey> all_keys() {
  std::vector<WorkerKey> keys;
  for (auto part : {data_keys(), fleet_keys(), exchange_keys(), optimizer_keys(), schedule_keys(),
                    process_keys(), emulation_keys()})
    for (auto& key : part) keys.push_back(std::move(key));
  return keys;
}

// "optimizer.beta1" -> {"optimizer", "beta1"}; "lr" -> {"", "lr"}.
std::pair<std::string_view, std::string_view> split_path(std::string_view path) {
  const auto dot = path.find('.');
  if (dot == std::string_view::npos) return {{}, path};
  return {path.substr(0, dot), path.substr(dot + 1)};
}

}  // namespace

const std::vector<WorkerKey>& worker_keys() {
  static const std::vector<WorkerKey> keys = all_keys();
  return keys;
}

std::set<std::string> worker_key_names(std::string_view section) {
  std::set<std::string> names;
  for (const auto& key : worker_keys()) {
    const auto [outer, inner] = split_path(key.path);
    if (section.empty())
      names.emplace(outer.empty() ? inner : outer);
    else if (outer == section)
      names.emplace(inner);
  }
  return names;
}

void read_worker_section(const YamlReader& in, const YAML::Node& worker, WorkerConfig& c) {
  in.check_keys(worker, "worker", worker_key_names(""));
  for (const auto& name : worker_key_names(""))
    if (const YAML::Node section = worker[name]; section && !worker_key_names(name).empty())
      in.check_keys(section, worker_key(name), worker_key_names(name));
  for (const auto& key : worker_keys()) {
    if (!key.read) continue;
    const auto [outer, inner] = split_path(key.path);
    const YAML::Node parent = outer.empty() ? worker : worker[std::string(outer)];
    if (!parent) continue;
    if (const YAML::Node n = parent[std::string(inner)]) key.read(in, n, c);
  }
}

nlohmann::json worker_settings(const WorkerConfig& c, std::string_view region) {
  json out = json::object();
  for (const auto& key : worker_keys()) {
    auto value = key.write(c, region);
    if (!value) continue;
    const auto [outer, inner] = split_path(key.path);
    json& at = outer.empty() ? out : out[std::string(outer)];
    at[std::string(inner)] = std::move(*value);
  }
  return out;
}

}  // namespace geotrain::worker
