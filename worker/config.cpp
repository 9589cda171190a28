#include "worker/config.hpp"

#include <fstream>
#include <set>
#include <sstream>

#include "compression/error_feedback.hpp"
#include "core/deployment_keys.hpp"
#include "core/endpoint.hpp"
#include "core/error.hpp"
#include "core/yaml_reader.hpp"
#include "worker/leader/fragment_schedule.hpp"

namespace geotrain::worker {

uint32_t WorkerConfig::merge_delay() const {
  return FragmentSchedule::merge_delay(overlap_mode, local_steps, fragments, fragment_delay);
}

uint32_t WorkerConfig::region_index(std::string_view name) const {
  for (uint32_t i = 0; i < regions.size(); ++i)
    if (regions[i] == name) return i;
  std::string list;
  for (const auto& r : regions) list += (list.empty() ? "" : ", ") + r;
  GT_REQUIRE(false, "region '{}' is not in the config's regions (allowed: {})", name, list);
  return 0;
}

std::string WorkerConfig::server_endpoint(const std::string& from, const std::string& to) const {
  if (auto r = routes.find(from); r != routes.end())
    if (auto e = r->second.find(to); e != r->second.end()) return e->second;
  auto e = server_endpoints.find(to);
  GT_REQUIRE(e != server_endpoints.end(), "server.endpoints has no entry for region '{}'", to);
  return e->second;
}

namespace {

void parse_data(const YamlReader& in, const YAML::Node& d, WorkerConfig& c) {
  in.check_keys(d, "worker.data", {"kind", "path", "validation_fraction", "eval_windows"});
  if (auto n = d["kind"]) {
    c.data.kind = in.choice(n, "worker.data.kind", {"fashion-mnist", "text"});
    c.data.path = c.data.kind == "text" ? DataConfig::kKjvFile : kFashionMnistDir;
  }
  if (auto n = d["path"]) c.data.path = in.string(n, "worker.data.path");
  if (auto n = d["validation_fraction"])
    c.data.validation_fraction = in.number<double>(n, "worker.data.validation_fraction", 1e-6, 0.5);
  if (auto n = d["eval_windows"])
    c.data.eval_windows = in.number<uint32_t>(n, "worker.data.eval_windows", 1, 1 << 20);
}

// worker.error_feedback: {decay: beta}.
void parse_error_feedback(const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
  in.check_keys(n, "worker.error_feedback", {"decay"});
  if (auto d = n["decay"]) {
    c.error_feedback_decay = in.number<float>(d, "worker.error_feedback.decay", 0.0f, 1.0f);
    compression::require_feedback_decay(c.error_feedback_decay,
                                        in.source() + ": worker.error_feedback.decay");
  }
}

// worker.optimizer: the inner optimizer (worker/training/optimizer.hpp). Reads worker.device, so
// runs after it: Muon has no device-resident step.
void parse_optimizer(const YamlReader& in, const YAML::Node& o, WorkerConfig& c) {
  in.check_keys(
      o, "worker.optimizer",
      {"kind", "momentum", "nesterov", "weight_decay", "beta1", "beta2", "eps", "no_decay",
       "muon_lr", "muon_momentum", "muon_nesterov", "muon_ns_steps", "adamw_tensors"});
  OptimizerConfig& oc = c.optimizer;
  if (auto n = o["kind"])
    oc.kind = parse_optimizer_kind(in.choice(n, "worker.optimizer.kind", {"sgd", "adamw", "muon"}));
  const bool muon = oc.kind == OptimizerKind::kMuon;
  for (const char* key :
       {"muon_lr", "muon_momentum", "muon_nesterov", "muon_ns_steps", "adamw_tensors"})
    GT_REQUIRE(muon || !o[key], "{}: worker.optimizer.{} is for kind muon (kind is {})",
               in.source(), key, optimizer_kind_name(oc.kind));
  for (const char* key : {"momentum", "nesterov"})
    GT_REQUIRE(!muon || !o[key],
               "{}: worker.optimizer.{} is SGD's; with kind muon the matrices' is "
               "worker.optimizer.muon_{}",
               in.source(), key, key);
  GT_REQUIRE(!muon || !c.devices.any("cuda"),
             "{}: worker.optimizer.kind muon runs on the CPU only (worker.device is {}; the "
             "device-resident step has sgd and adamw)",
             in.source(), c.devices.text());
  if (auto n = o["no_decay"]) oc.no_decay = in.strings(n, "worker.optimizer.no_decay");
  if (auto n = o["momentum"])
    oc.momentum = in.number<float>(n, "worker.optimizer.momentum", 0, 0.999999f);
  if (auto n = o["nesterov"]) oc.nesterov = in.boolean(n, "worker.optimizer.nesterov");
  if (auto n = o["weight_decay"])
    oc.weight_decay = in.number<float>(n, "worker.optimizer.weight_decay", 0, 1);
  if (auto n = o["beta1"]) oc.beta1 = in.number<float>(n, "worker.optimizer.beta1", 0, 0.999999f);
  if (auto n = o["beta2"]) oc.beta2 = in.number<float>(n, "worker.optimizer.beta2", 0, 0.999999f);
  if (auto n = o["eps"]) oc.eps = in.number<float>(n, "worker.optimizer.eps", 1e-12f, 1);
  if (auto n = o["muon_lr"])
    oc.muon_lr = in.number<float>(n, "worker.optimizer.muon_lr", 1e-9f, 100);
  if (auto n = o["muon_momentum"])
    oc.muon_momentum = in.number<float>(n, "worker.optimizer.muon_momentum", 0, 0.999999f);
  if (auto n = o["muon_nesterov"])
    oc.muon_nesterov = in.boolean(n, "worker.optimizer.muon_nesterov");
  if (auto n = o["muon_ns_steps"])
    oc.muon_ns_steps = in.number<uint32_t>(n, "worker.optimizer.muon_ns_steps", 1, 100);
  if (auto n = o["adamw_tensors"])
    oc.adamw_tensors = in.strings(n, "worker.optimizer.adamw_tensors");
}

// What a worker reads outside its own section besides regions and the model: the servers'
// endpoints, and the protocol settings it shares with the servers (core/deployment_keys.hpp:
// the staleness bound, the outer step its eager and delayed merges predict, the streaming
// layout), read by the one function the servers use too.
void parse_shared_keys(const YamlReader& in, const YAML::Node& root, WorkerConfig& c) {
  if (auto server = root["server"]) {
    GT_REQUIRE(server.IsMap(), "{}: 'server' must be a mapping", in.source());
    if (auto e = server["endpoints"]) c.server_endpoints = read_endpoints(in, e, c.regions);
    c.standby = read_standby(in, server, c.regions);
  }
  const SharedProtocol shared = read_shared_protocol(in, root);
  c.staleness_bound = shared.staleness_bound;
  c.outer = shared.outer;
  c.fragments = shared.fragments;
  c.stream_critical = shared.stream_critical;
}

void parse_guard(const YamlReader& in, const YAML::Node& g, WorkerConfig& c) {
  in.check_keys(g, "worker.anomaly_guard",
                {"enabled", "window", "k_sigma", "min_samples", "max_consecutive_skips"});
  if (auto n = g["enabled"]) c.guard.enabled = in.boolean(n, "worker.anomaly_guard.enabled");
  if (auto n = g["window"])
    c.guard.window = in.number<size_t>(n, "worker.anomaly_guard.window", 2, 100000);
  if (auto n = g["k_sigma"])
    c.guard.k_sigma = in.number<double>(n, "worker.anomaly_guard.k_sigma", 0.1, 1000);
  if (auto n = g["min_samples"])
    c.guard.min_samples = in.number<size_t>(n, "worker.anomaly_guard.min_samples", 2, 100000);
  if (auto n = g["max_consecutive_skips"])
    c.guard.max_consecutive_skips =
        in.number<size_t>(n, "worker.anomaly_guard.max_consecutive_skips", 0, 100000);
  // A spread needs two samples, and the window must hold min_samples of them (AnomalyGuard's
  // preconditions, checked here so that `geotrain run` refuses the config before it starts).
  GT_REQUIRE(c.guard.min_samples <= c.guard.window,
             "{}: worker.anomaly_guard.min_samples is {}, more than its window ({}): the guard "
             "would never judge a step",
             in.source(), c.guard.min_samples, c.guard.window);
}

// worker.checkpoint: {every, keep, dir}.
void parse_checkpoint(const YamlReader& in, const YAML::Node& k, WorkerConfig& c) {
  const auto& source = in.source();
  GT_REQUIRE(k.IsMap(), "{}: worker.checkpoint must be a mapping like {{every: 1, keep: 2}}",
             source);
  in.check_keys(k, "worker.checkpoint", {"every", "keep", "dir"});
  if (auto n = k["every"])
    c.checkpoint.every = in.number<uint64_t>(n, "worker.checkpoint.every", 0, uint64_t{1} << 40);
  if (auto n = k["keep"])
    c.checkpoint.keep = in.number<uint32_t>(n, "worker.checkpoint.keep", 1, 1000);
  if (auto n = k["dir"]) c.checkpoint.dir = in.string(n, "worker.checkpoint.dir");
}

// worker.overlap and fragment_delay, and the fragment count's bound (local_steps, read before;
// fragments and stream_critical themselves are shared keys: parse_shared_keys).
void parse_overlap(const YamlReader& in, const YAML::Node& w, WorkerConfig& c) {
  const auto& source = in.source();
  if (auto n = w["overlap"]) {
    const std::string text = in.string(n, "worker.overlap");
    if (const auto on = true_or_false(n)) {
      c.overlap_mode = *on ? OverlapMode::carry : OverlapMode::off;
    } else {
      GT_REQUIRE(text == "eager" || text == "delayed",
                 "{}: worker.overlap is '{}', allowed: false, true, eager, delayed", source, text);
      c.overlap_mode = parse_overlap_mode(text);
    }
    c.overlap = c.overlap_mode != OverlapMode::off;
  }
  GT_REQUIRE(c.fragments <= c.local_steps,
             "{}: worker.fragments is {}, must be at most worker.local_steps = {} (each fragment "
             "syncs at its own step of the round)",
             source, c.fragments, c.local_steps);
  if (auto n = w["fragment_delay"]) {
    c.fragment_delay = in.number<uint32_t>(n, "worker.fragment_delay", 0, c.local_steps);
    GT_REQUIRE(*c.fragment_delay == 0 || c.overlap,
               "{}: worker.fragment_delay is {} but worker.overlap is false: a delayed merge "
               "needs an overlap mode (true, eager or delayed)",
               source, *c.fragment_delay);
  }
}

// worker.slowdowns: [{region, from_s, until_s, factor}], each window inside the run.
std::vector<Slowdown> parse_slowdowns(const YamlReader& in, const YAML::Node& list,
                                      const WorkerConfig& c) {
  GT_REQUIRE(list.IsSequence(),
             "{}: worker.slowdowns must be a list of {{region, from_s, until_s, factor}}",
             in.source());
  std::vector<Slowdown> out;
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
    out.push_back(d);
  }
  return out;
}

// The per-region maps: worker.step_delay_ms and worker.step_time_ms {region: ms}, and
// worker.routes {from: {to: endpoint}}; worker.slowdowns.
void parse_region_maps(const YamlReader& in, const YAML::Node& w, WorkerConfig& c) {
  const auto& source = in.source();
  const auto milliseconds = [&](const char* key, std::map<std::string, uint32_t>& out) {
    const auto d = w[key];
    if (!d) return;
    GT_REQUIRE(d.IsMap(), "{}: worker.{} must map region names to milliseconds", source, key);
    for (const auto& kv : d) {
      const auto region = kv.first.as<std::string>();
      c.region_index(region);
      out[region] =
          in.number<uint32_t>(kv.second, fmt::format("worker.{}.{}", key, region), 0, 600'000);
    }
  };
  milliseconds("step_delay_ms", c.step_delay_ms);
  milliseconds("step_time_ms", c.step_time_ms);
  if (auto s = w["slowdowns"]) c.slowdowns = parse_slowdowns(in, s, c);
  if (auto routes = w["routes"]) {
    GT_REQUIRE(routes.IsMap(), "{}: worker.routes must map a region to {{region: endpoint}}",
               source);
    for (const auto& from : routes) {
      const auto a = from.first.as<std::string>();
      c.region_index(a);
      GT_REQUIRE(from.second.IsMap(), "{}: worker.routes.{} must map region names to endpoints",
                 source, a);
      for (const auto& to : from.second) {
        const auto b = to.first.as<std::string>();
        c.region_index(b);
        const auto key = fmt::format("worker.routes.{}.{}", a, b);
        c.routes[a][b] = in.string(to.second, key);
        require_endpoint(c.routes[a][b], source + ": " + key);
      }
    }
  }
}

// worker.round_time_ms (a number, or auto: H steps of the fastest region's worker.step_time_ms)
// and worker.max_local_steps (read after the region maps).
void parse_round_budget(const YamlReader& in, const YAML::Node& w, WorkerConfig& c) {
  const auto& source = in.source();
  if (auto n = w["round_time_ms"]) {
    if (n.IsScalar() && n.Scalar() == "auto") {
      GT_REQUIRE(c.step_time_ms.size() == c.regions.size(),
                 "{}: worker.round_time_ms auto needs worker.step_time_ms for every region ({} of "
                 "{} have one): the round's budget is local_steps of the fastest region's steps",
                 source, c.step_time_ms.size(), c.regions.size());
      uint32_t fastest = UINT32_MAX;
      for (const auto& [region, ms] : c.step_time_ms) fastest = std::min(fastest, ms);
      c.round_time_ms = double(fastest) * c.local_steps;
      GT_REQUIRE(c.round_time_ms > 0,
                 "{}: worker.round_time_ms auto: a region's worker.step_time_ms is 0", source);
    } else {
      c.round_time_ms =
          in.number<double>(n, "worker.round_time_ms (milliseconds, 0 or auto)", 0, 86'400'000);
    }
  }
  c.max_local_steps = 2 * c.local_steps;
  if (auto n = w["max_local_steps"]) {
    GT_REQUIRE(c.round_time_ms > 0,
               "{}: worker.max_local_steps bounds time-budgeted rounds: it needs "
               "worker.round_time_ms",
               source);
    c.max_local_steps = in.number<uint32_t>(n, "worker.max_local_steps", c.local_steps, 1 << 20);
  }
}

// The worker section's keys.
const std::set<std::string> kWorkerKeys{"workers_per_region",
                                        "device",
                                        "precision",
                                        "leader_on_device",
                                        "elastic",
                                        "data_dir",
                                        "data",
                                        "batch_size",
                                        "accumulation_steps",
                                        "local_steps",
                                        "rounds",
                                        "critical_codec",
                                        "noncritical_codec",
                                        "error_feedback",
                                        "chunk_align",
                                        "overlap",
                                        "optimizer",
                                        "lr",
                                        "warmup_steps",
                                        "lr_decay",
                                        "lr_cycle",
                                        "min_lr",
                                        "scale_lr",
                                        "lr_scaling",
                                        "lr_reference_batch",
                                        "max_grad_norm",
                                        "anomaly_guard",
                                        "eval_every",
                                        "seed",
                                        "gloo_host",
                                        "metrics_port",
                                        "metrics_host",
                                        "run_dir",
                                        "timeout_ms",
                                        "step_delay_ms",
                                        "step_time_ms",
                                        "round_time_ms",
                                        "max_local_steps",
                                        "slowdowns",
                                        "routes",
                                        "blas_threads",
                                        "bucket_cap_mb",
                                        "zero_stage",
                                        "external",
                                        "fragments",
                                        "fragment_delay",
                                        "stream_critical",
                                        "shard_wait_ms",
                                        "streams_per_server",
                                        "link_mbps",
                                        "socket_buffer_kib",
                                        "checkpoint"};

// worker.precision, leader_on_device, elastic and data_dir, and whether the model can train on
// the data (reads model, worker.data and the devices, read_region_devices: after them).
void parse_device_and_data(const YamlReader& in, const YAML::Node& w, WorkerConfig& c) {
  const auto& source = in.source();
  if (auto n = w["precision"]) c.precision = in.choice(n, "worker.precision", {"fp32", "bf16"});
  if (auto n = w["leader_on_device"]) c.leader_on_device = in.boolean(n, "worker.leader_on_device");
  if (auto n = w["elastic"]) c.elastic = in.boolean(n, "worker.elastic");
  GT_REQUIRE(c.precision == "fp32" || c.devices.any("cuda"),
             "{}: worker.precision bf16 needs worker.device cuda (the CPU trains in fp32)", source);
  GT_REQUIRE(c.precision == "fp32" || c.model.kind == "gpt",
             "{}: worker.precision bf16 is for model.kind gpt (model.kind is {})", source,
             c.model.kind);
  if (auto n = w["data_dir"]) {
    GT_REQUIRE(!w["data"], "{}: worker.data_dir and worker.data are both set: use worker.data.path",
               source);
    c.data.path = in.string(n, "worker.data_dir");
  }
  GT_REQUIRE(c.external || c.model.is_language_model() == (c.data.kind == "text"),
             "{}: model.kind {} cannot train on worker.data.kind {} (a gpt trains on text, an mlp "
             "on fashion-mnist)",
             source, c.model.kind, c.data.kind);
}

// worker.zero_stage, and what it cannot run with (reads device and elastic: after them).
void parse_zero_stage(const YamlReader& in, const YAML::Node& n, WorkerConfig& c) {
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

// worker.lr_scaling (or its older spelling scale_lr: true, linear) and lr_reference_batch.
void parse_lr_scaling(const YamlReader& in, const YAML::Node& w, WorkerConfig& c) {
  GT_REQUIRE(!(w["scale_lr"] && w["lr_scaling"]),
             "{}: worker.scale_lr and worker.lr_scaling are two spellings of one setting: give "
             "lr_scaling (none, linear or sqrt) only",
             in.source());
  if (auto n = w["scale_lr"])
    if (in.boolean(n, "worker.scale_lr")) c.lr_scaling = LrScaling::kLinear;
  if (auto n = w["lr_scaling"]) {
    const auto kind = in.choice(n, "worker.lr_scaling", {"none", "linear", "sqrt"});
    if (kind != "none") c.lr_scaling = kind == "sqrt" ? LrScaling::kSqrt : LrScaling::kLinear;
  }
  if (auto n = w["lr_reference_batch"]) {
    GT_REQUIRE(c.lr_scaling.has_value(),
               "{}: worker.lr_reference_batch is set but the learning rate is not scaled (set "
               "worker.lr_scaling: linear or sqrt)",
               in.source());
    c.lr_reference_batch = in.number<uint32_t>(n, "worker.lr_reference_batch", 1, 1u << 30);
  }
}

// worker.lr_cycle {period, multiplier}, with lr_decay cyclic only (which needs it).
void parse_lr_cycle(const YamlReader& in, const YAML::Node& w, WorkerConfig& c) {
  const auto cycle = w["lr_cycle"];
  if (c.decay != LrDecay::kCyclic) {
    GT_REQUIRE(!cycle, "{}: worker.lr_cycle is for worker.lr_decay cyclic (lr_decay is {})",
               in.source(), c.decay == LrDecay::kCosine ? "cosine" : "constant");
    return;
  }
  GT_REQUIRE(cycle && cycle.IsMap(),
             "{}: worker.lr_decay cyclic needs worker.lr_cycle: {{period: STEPS, multiplier: M}} "
             "(the first cycle's steps after the warm-up; each next cycle M times longer, "
             "default 1)",
             in.source());
  in.check_keys(cycle, "worker.lr_cycle", {"period", "multiplier"});
  GT_REQUIRE(cycle["period"], "{}: worker.lr_cycle has no period (steps)", in.source());
  c.lr_cycle_steps =
      in.number<uint64_t>(cycle["period"], "worker.lr_cycle.period", 1, uint64_t{1} << 40);
  if (auto n = cycle["multiplier"])
    c.lr_cycle_mult = in.number<uint32_t>(n, "worker.lr_cycle.multiplier", 1, 64);
}

// The learning-rate schedule: worker.lr, min_lr, lr_decay (lr_cycle) and its scaling.
void parse_schedule(const YamlReader& in, const YAML::Node& w, WorkerConfig& c) {
  if (auto n = w["lr"]) c.lr = in.number<float>(n, "worker.lr", 1e-9f, 100);
  if (auto n = w["min_lr"]) c.min_lr = in.number<float>(n, "worker.min_lr", 0, 100);
  if (auto n = w["lr_decay"]) {
    const auto kind = in.choice(n, "worker.lr_decay", {"constant", "cosine", "cyclic"});
    c.decay = kind == "cosine"   ? LrDecay::kCosine
              : kind == "cyclic" ? LrDecay::kCyclic
                                 : LrDecay::kConstant;
  }
  parse_lr_cycle(in, w, c);
  parse_lr_scaling(in, w, c);
  // The schedule's own checks (LrSchedule::validate), here too so that `geotrain run` refuses the
  // config before it starts a process.
  GT_REQUIRE(c.min_lr <= c.lr, "{}: worker.min_lr is {}, must be at most worker.lr = {}",
             in.source(), c.min_lr, c.lr);
  GT_REQUIRE(c.decay != LrDecay::kCosine || c.total_steps() > c.warmup_steps,
             "{}: worker.lr_decay cosine needs more steps than worker.warmup_steps = {}: the run "
             "has rounds x local_steps = {} x {} = {}",
             in.source(), c.warmup_steps, c.rounds, c.local_steps, c.total_steps());
}

}  // namespace

WorkerConfig parse_worker_config(std::string_view yaml_text, std::string_view source) try {
  const YamlReader in{std::string(source)};
  const YAML::Node root = in.load_deployment_config(yaml_text);
  WorkerConfig c;
  c.regions = read_regions(in, root);
  c.workers = read_region_workers(in, root, c.regions, 1024);

  c.model = models::parse_model_spec(root["model"], in);
  if (auto w = root["worker"]; w && w.IsMap() && w["external"])
    c.external = in.boolean(w["external"], "worker.external");
  GT_REQUIRE(
      c.external || c.model.kind != "mlp" || !c.model.arch.empty(),
      "{}: model.arch is missing: a worker needs the architecture (e.g. \"784-256-128-10\"), "
      "unless the workers are your own processes (worker.external: true, docs/python.md)",
      source);
  if (c.model.is_language_model()) {
    c.data.kind = "text";
    c.data.path = DataConfig::kKjvFile;
  }

  parse_shared_keys(in, root, c);

  c.security = wire::parse_security_config(root["security"], in, /*allow_auto=*/false);

  auto w = root["worker"];
  if (!w) return c;
  GT_REQUIRE(w.IsMap(), "{}: 'worker' must be a mapping", source);  // before w["data"]
  if (auto d = w["data"]) parse_data(in, d, c);
  in.check_keys(w, "worker", kWorkerKeys);
  auto get_u32 = [&](const char* key, uint32_t& out, uint32_t lo, uint32_t hi) {
    if (auto n = w[key]) out = in.number<uint32_t>(n, fmt::format("worker.{}", key), lo, hi);
  };
  auto get_u64 = [&](const char* key, uint64_t& out, uint64_t lo, uint64_t hi) {
    if (auto n = w[key]) out = in.number<uint64_t>(n, fmt::format("worker.{}", key), lo, hi);
  };
  c.batch_size = read_region_batches(in, root, c.regions);
  get_u32("blas_threads", c.blas_threads, 1, 256);
  get_u32("accumulation_steps", c.accumulation_steps, 1, 1024);
  get_u32("local_steps", c.local_steps, 1, 1 << 20);
  get_u64("rounds", c.rounds, 1, uint64_t{1} << 32);
  get_u64("warmup_steps", c.warmup_steps, 0, uint64_t{1} << 32);
  get_u64("eval_every", c.eval_every, 0, uint64_t{1} << 32);
  get_u64("seed", c.seed, 0, UINT64_MAX);
  c.devices = read_region_devices(in, root, c.regions);
  parse_device_and_data(in, w, c);
  for (auto [key, out] : {std::pair{"critical_codec", &c.critical_codec},
                          {"noncritical_codec", &c.noncritical_codec}}) {
    if (auto n = w[key])
      *out = compression::CodecSchedule::parse(in, n, fmt::format("worker.{}", key));
  }
  if (auto n = w["error_feedback"]) parse_error_feedback(in, n, c);
  if (auto n = w["chunk_align"])
    c.tensor_segments = in.choice(n, "worker.chunk_align", {"segment", "tensor"}) == "tensor";
  parse_overlap(in, w, c);
  if (auto o = w["optimizer"]) parse_optimizer(in, o, c);
  parse_schedule(in, w, c);
  if (auto n = w["bucket_cap_mb"])
    c.bucket_cap_mb = in.number<double>(n, "worker.bucket_cap_mb", 0, 4096);
  if (auto n = w["zero_stage"]) parse_zero_stage(in, n, c);
  if (auto n = w["max_grad_norm"])
    c.max_grad_norm = in.number<double>(n, "worker.max_grad_norm", 0, 1e9);
  if (auto g = w["anomaly_guard"]) parse_guard(in, g, c);
  if (auto n = w["gloo_host"]) c.gloo_host = in.string(n, "worker.gloo_host");
  if (auto n = w["metrics_port"]) {
    if (n.IsScalar() && n.Scalar() == "auto")
      c.metrics_port_auto = true;
    else
      c.metrics_port = in.number<uint16_t>(n, "worker.metrics_port (a port or auto)", 0, 65535);
  }
  if (auto n = w["metrics_host"]) c.metrics_host = in.string(n, "worker.metrics_host");
  if (auto n = w["run_dir"]) c.run_dir = in.string(n, "worker.run_dir");
  if (auto k = w["checkpoint"]) parse_checkpoint(in, k, c);
  if (auto n = w["timeout_ms"])
    c.timeout =
        std::chrono::milliseconds(in.number<int64_t>(n, "worker.timeout_ms", 100, 86'400'000));
  if (auto n = w["shard_wait_ms"]) {
    c.shard_wait_auto = n.IsScalar() && n.Scalar() == "auto";
    c.shard_wait = c.shard_wait_auto ? std::min(WorkerConfig::kAutoShardWaitStart, c.timeout / 2)
                                     : std::chrono::milliseconds(in.number<int64_t>(
                                           n, "worker.shard_wait_ms", 0, 86'400'000));
    GT_REQUIRE(c.shard_wait < c.timeout,
               "{}: worker.shard_wait_ms is {}, must be below worker.timeout_ms = {} (after "
               "timeout_ms without an answer a server counts as gone)",
               source, c.shard_wait.count(), c.timeout.count());
  }
  if (auto n = w["streams_per_server"]) {
    if (n.IsScalar() && n.Scalar() == "auto")
      c.streams_per_server = 0;
    else
      c.streams_per_server =
          in.number<uint32_t>(n, "worker.streams_per_server (1..64 or auto)", 1, 64);
  }
  if (auto n = w["link_mbps"]) c.link_mbps = in.number<double>(n, "worker.link_mbps", 1, 1e6);
  if (auto n = w["socket_buffer_kib"])
    c.socket_buffer_kib = in.number<uint32_t>(n, "worker.socket_buffer_kib", 0, 1u << 20);
  parse_region_maps(in, w, c);
  parse_round_budget(in, w, c);
  return c;
} catch (const YAML::Exception& e) {
  throw yaml_input_error(source, e);  // a check is missing: still an InputError
}

WorkerConfig load_worker_config(const std::filesystem::path& file) {
  std::ifstream f(file);
  GT_REQUIRE(f.good(), "config file '{}' cannot be read", file.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_worker_config(ss.str(), file.string());
}

}  // namespace geotrain::worker
