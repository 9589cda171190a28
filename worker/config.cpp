#include "worker/config.hpp"

#include <fstream>
#include <set>
#include <sstream>

#include "compression/error_feedback.hpp"
#include "core/deployment_keys.hpp"
#include "core/endpoint.hpp"
#include "core/error.hpp"
#include "core/yaml_reader.hpp"
#include "worker/config_keys.hpp"
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

// Which optimizer keys go with which kind (worker.optimizer, read through the key table).
void check_optimizer_keys(const YamlReader& in, const YAML::Node& o, const WorkerConfig& c) {
  const bool muon = c.optimizer.kind == OptimizerKind::kMuon;
  for (const char* key :
       {"muon_lr", "muon_momentum", "muon_nesterov", "muon_ns_steps", "adamw_tensors"})
    GT_REQUIRE(muon || !o[key], "{}: worker.optimizer.{} is for kind muon (kind is {})",
               in.source(), key, optimizer_kind_name(c.optimizer.kind));
  for (const char* key : {"momentum", "nesterov"})
    GT_REQUIRE(!muon || !o[key],
               "{}: worker.optimizer.{} is SGD's; with kind muon the matrices' is "
               "worker.optimizer.muon_{}",
               in.source(), key, key);
}

// The learning-rate schedule's rules across its keys (LrSchedule::validate's too, so that
// `geotrain run` refuses the config before it starts a process).
void check_schedule(const YamlReader& in, const YAML::Node& w, const WorkerConfig& c) {
  GT_REQUIRE(!(w["scale_lr"] && w["lr_scaling"]),
             "{}: worker.scale_lr and worker.lr_scaling are two spellings of one setting: give "
             "lr_scaling (none, linear or sqrt) only",
             in.source());
  if (c.decay != LrDecay::kCyclic) {
    GT_REQUIRE(!w["lr_cycle"], "{}: worker.lr_cycle is for worker.lr_decay cyclic (lr_decay is {})",
               in.source(), c.decay == LrDecay::kCosine ? "cosine" : "constant");
  } else {
    GT_REQUIRE(w["lr_cycle"],
               "{}: worker.lr_decay cyclic needs worker.lr_cycle: {{period: STEPS, multiplier: "
               "M}} (the first cycle's steps after the warm-up; each next cycle M times longer, "
               "default 1)",
               in.source());
    GT_REQUIRE(w["lr_cycle"]["period"], "{}: worker.lr_cycle has no period (steps)", in.source());
  }
  GT_REQUIRE(c.min_lr <= c.lr, "{}: worker.min_lr is {}, must be at most worker.lr = {}",
             in.source(), c.min_lr, c.lr);
  GT_REQUIRE(c.decay != LrDecay::kCosine || c.total_steps() > c.warmup_steps,
             "{}: worker.lr_decay cosine needs more steps than worker.warmup_steps = {}: the run "
             "has rounds x local_steps = {} x {} = {}",
             in.source(), c.warmup_steps, c.rounds, c.local_steps, c.total_steps());
}

// The rules that tie keys of the worker section together, after the table has read them all.
void check_worker_section(const YamlReader& in, const YAML::Node& w, WorkerConfig& c) {
  const auto& source = in.source();
  GT_REQUIRE(!(w["data_dir"] && w["data"]),
             "{}: worker.data_dir and worker.data are both set: use worker.data.path", source);
  GT_REQUIRE(c.fragments <= c.local_steps,
             "{}: worker.fragments is {}, must be at most worker.local_steps = {} (each fragment "
             "syncs at its own step of the round)",
             source, c.fragments, c.local_steps);
  if (auto o = w["optimizer"]) check_optimizer_keys(in, o, c);
  check_schedule(in, w, c);
  // A spread needs two samples, and the window must hold min_samples of them (AnomalyGuard's
  // preconditions, checked here so that `geotrain run` refuses the config before it starts).
  GT_REQUIRE(c.guard.min_samples <= c.guard.window,
             "{}: worker.anomaly_guard.min_samples is {}, more than its window ({}): the guard "
             "would never judge a step",
             source, c.guard.min_samples, c.guard.window);
  GT_REQUIRE(c.external || c.model.is_language_model() == (c.data.kind == "text"),
             "{}: model.kind {} cannot train on worker.data.kind {} (a gpt trains on text, an mlp "
             "on fashion-mnist)",
             source, c.model.kind, c.data.kind);
  if (!w["max_local_steps"]) c.max_local_steps = 2 * c.local_steps;
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
  GT_REQUIRE(w.IsMap(), "{}: 'worker' must be a mapping", source);
  // The keys the launcher and the servers read too (worker.batch_size, device; workers_per_region,
  // fragments and stream_critical above), then the section through its key table.
  c.batch_size = read_region_batches(in, root, c.regions);
  c.devices = read_region_devices(in, root, c.regions);
  read_worker_section(in, w, c);
  check_worker_section(in, w, c);
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
