// worker/config_keys: the `worker` section's key table. What the parser reads through a row is what
// worker_settings() writes back at the same path, and docs/training.md documents every key the
// table has (and no other).
#include <doctest/doctest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "worker/config.hpp"
#include "worker/config_keys.hpp"

using namespace geotrain;
using nlohmann::json;

namespace {

// Every key of the table that a config can set, each to a value other than its default.
const char* kEveryKey = R"(
regions: [a, b]
model: {arch: 784-10}
worker:
  workers_per_region: 2
  batch_size: 16
  device: cpu
  precision: fp32
  leader_on_device: false
  elastic: false
  external: false
  data: {kind: fashion-mnist, path: /data/f, validation_fraction: 0.1, eval_windows: 8}
  blas_threads: 2
  accumulation_steps: 3
  local_steps: 8
  rounds: 7
  eval_every: 3
  seed: 5
  critical_codec: int8
  noncritical_codec: [{until_round: 3, codec: int8}, {codec: onebit}]
  error_feedback: {decay: 0.5}
  chunk_align: tensor
  overlap: eager
  fragments: 2
  stream_critical: false
  fragment_delay: 2
  optimizer: {kind: adamw, no_decay: [x], momentum: 0.5, nesterov: true, weight_decay: 0.125,
              beta1: 0.75, beta2: 0.875, eps: 0.000001}
  lr: 0.5
  warmup_steps: 2
  min_lr: 0.25
  lr_decay: cosine
  lr_scaling: sqrt
  lr_reference_batch: 32
  bucket_cap_mb: 5
  zero_stage: 1
  max_grad_norm: 1.5
  anomaly_guard: {enabled: false, window: 20, k_sigma: 3, min_samples: 5, max_consecutive_skips: 2}
  gloo_host: 10.0.0.1
  metrics_port: auto
  metrics_host: 127.0.0.1
  run_dir: /runs/r
  checkpoint: {every: 2, keep: 3, dir: snaps}
  timeout_ms: 5000
  shard_wait_ms: auto
  streams_per_server: 4
  link_mbps: 100
  socket_buffer_kib: 64
  step_delay_ms: {a: 1}
  step_time_ms: {a: 10, b: 20}
  slowdowns: [{region: a, from_s: 1, until_s: 2, factor: 3}]
  routes: {a: {b: "tcp://127.0.0.1:9"}}
  round_time_ms: 100
  max_local_steps: 12
)";

// What the YAML says, as JSON: a scalar that reads as JSON (a number, true, false) is that, any
// other a string.
json as_json(const YAML::Node& n) {
  if (n.IsSequence()) {
    json out = json::array();
    for (const auto& e : n) out.push_back(as_json(e));
    return out;
  }
  if (n.IsMap()) {
    json out = json::object();
    for (const auto& kv : n) out[kv.first.as<std::string>()] = as_json(kv.second);
    return out;
  }
  const auto parsed = json::parse(n.Scalar(), nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? json(n.Scalar()) : parsed;
}

// Equal, numbers within float precision (a float field written back as a double).
bool same(const json& a, const json& b) {
  if (a.is_number() && b.is_number())
    return std::abs(a.get<double>() - b.get<double>()) <= 1e-6 * std::abs(b.get<double>());
  if (a.is_array() && b.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!same(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object() && b.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a.items())
      if (!b.contains(k) || !same(v, b[k])) return false;
    return true;
  }
  return a == b;
}

// The node at `path` ("optimizer.beta1") under `worker`.
YAML::Node at(const YAML::Node& worker, const std::string& path) {
  const auto dot = path.find('.');
  if (dot == std::string::npos) return worker[path];
  const YAML::Node section = worker[path.substr(0, dot)];
  return section ? section[path.substr(dot + 1)] : YAML::Node();
}

}  // namespace

// Compares what the parser read from `text` through each row with what the row writes back (at
// its path in worker_settings, too); the paths compared.
std::set<std::string> compare_written(const std::string& text) {
  const auto c = worker::parse_worker_config(text, "every.yaml");
  const json settings = worker::worker_settings(c, "a");
  const YAML::Node section = YAML::Load(text)["worker"];
  std::set<std::string> compared;
  for (const auto& key : worker::worker_keys()) {
    CAPTURE(key.path);
    const auto written = key.write(c, "a");
    const YAML::Node given = at(section, key.path);
    if (!written || !given) continue;  // not written (an older spelling), or not set here
    CHECK_MESSAGE(same(*written, as_json(given)), written->dump(), " != ", as_json(given).dump());
    const auto dot = key.path.find('.');
    const json& placed = dot == std::string::npos
                             ? settings.at(key.path)
                             : settings.at(key.path.substr(0, dot)).at(key.path.substr(dot + 1));
    CHECK(placed == *written);
    compared.insert(key.path);
  }
  return compared;
}

TEST_CASE("every worker key is written back as the parser read it") {
  // Muon's keys go with kind muon only: a second config sets them.
  const std::string adamw = kEveryKey;
  const auto from = adamw.find("  optimizer:");
  const auto to = adamw.find("  lr:", from);
  const std::string muon =
      adamw.substr(0, from) +
      "  optimizer: {kind: muon, muon_lr: 0.01, muon_momentum: 0.5, muon_nesterov: false,\n"
      "              muon_ns_steps: 3, adamw_tensors: [y]}\n" +
      adamw.substr(to);
  auto compared = compare_written(adamw);
  compared.merge(compare_written(muon));
  const auto c = worker::parse_worker_config(adamw, "every.yaml");
  for (const auto& key : worker::worker_keys())
    if (key.write(c, "a"))
      CHECK_MESSAGE(compared.count(key.path), "the test's configs do not set worker.", key.path);
}

TEST_CASE("a key of the worker's table is written with its default when the config omits it") {
  const auto c =
      worker::parse_worker_config("regions: [a, b]\nmodel: {arch: 784-10}\nworker: {}\n", "w.yaml");
  const json s = worker::worker_settings(c, "b");
  CHECK(s.at("lr") == json(0.05f));
  CHECK(s.at("optimizer").at("kind") == "sgd");
  CHECK(s.at("overlap") == "false");
  CHECK(s.at("fragment_delay").is_null());  // the default: H / P with overlap, 0 without
  CHECK(s.at("streams_per_server") == 0);   // auto
  CHECK(s.at("max_local_steps") == 2);
  CHECK(s.at("data").at("kind") == "fashion-mnist");
  CHECK_FALSE(s.contains("lr_cycle"));  // lr_decay cyclic only
  CHECK_FALSE(s.contains("scale_lr"));  // the older spelling of lr_scaling
  CHECK(s.at("lr_scaling") == "none");
}

TEST_CASE("a key per region is written as the asking region's") {
  const auto c = worker::parse_worker_config(
      "regions: [a, b]\nmodel: {arch: 784-10}\n"
      "worker: {workers_per_region: {a: 3, b: 1}, batch_size: {a: 8, b: 32}}\n",
      "w.yaml");
  CHECK(worker::worker_settings(c, "a").at("workers_per_region") == 3);
  CHECK(worker::worker_settings(c, "b").at("workers_per_region") == 1);
  CHECK(worker::worker_settings(c, "b").at("batch_size") == 32);
  CHECK_THROWS_AS(worker::worker_settings(c, "x"), InputError);
}

TEST_CASE("an unknown key in a section of the worker's table is refused, naming the section") {
  const auto bad = [](const std::string& worker) {
    return worker::parse_worker_config("regions: [a]\nmodel: {arch: 784-10}\nworker: " + worker,
                                       "w.yaml");
  };
  CHECK_THROWS_WITH_AS(bad("{optimizer: {bta1: 0.9}}"),
                       doctest::Contains("unknown key 'worker.optimizer.bta1'"), InputError);
  CHECK_THROWS_WITH_AS(bad("{checkpoint: {evry: 1}}"),
                       doctest::Contains("unknown key 'worker.checkpoint.evry'"), InputError);
  CHECK_THROWS_WITH_AS(bad("{anomaly_guard: 3}"),
                       doctest::Contains("'worker.anomaly_guard' must be a mapping"), InputError);
  CHECK_THROWS_WITH_AS(bad("{lrr: 3}"), doctest::Contains("did you mean 'worker.lr'"), InputError);
}

TEST_CASE("docs/training.md documents every key of the worker's table, and no other") {
  std::ifstream f(std::string(GEOTRAIN_SOURCE_DIR) + "/docs/training.md");
  REQUIRE(f.good());
  std::stringstream text;
  text << f.rdbuf();
  const std::string doc = text.str();
  const auto begin = doc.find("## Configuration: `worker`");
  REQUIRE(begin != std::string::npos);
  const auto end = doc.find("\n## ", begin + 1);
  const std::string table = doc.substr(begin, end - begin);
  // A row: | `key` | default | meaning |, the key's section rows included (`optimizer.muon_lr`).
  std::set<std::string> documented;
  std::map<std::string, std::string> rows;  // top-level name -> its rows' text
  const std::regex row(R"(\n\| `([a-z_]+)(\.[a-z_0-9]+)?` \|([^\n]*))");
  for (auto it = std::sregex_iterator(table.begin(), table.end(), row);
       it != std::sregex_iterator(); ++it) {
    documented.insert((*it)[1]);
    rows[(*it)[1]] += std::string((*it)[2]) + (*it)[3].str();
  }
  CHECK(documented == worker::worker_key_names(""));
  for (const auto& name : worker::worker_key_names(""))
    for (const auto& inner : worker::worker_key_names(name)) {
      CAPTURE(name);
      CHECK_MESSAGE(rows[name].find(inner) != std::string::npos, "worker.", name, ".", inner,
                    " is not in its row of docs/training.md");
    }
}
