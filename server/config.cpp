#include "server/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "compression/error_feedback.hpp"
#include "compression/factory.hpp"
#include "core/deployment_keys.hpp"
#include "core/error.hpp"
#include "core/region_workers.hpp"
#include "core/yaml_reader.hpp"

namespace geotrain::server {

namespace {

// Thin names over core/yaml_reader.hpp, which owns the strict reading and its messages.
struct Ctx {
  YamlReader in;
  std::string source;
};

void check_keys(const Ctx& c, const YAML::Node& node, const std::string& where,
                const std::set<std::string>& allowed) {
  c.in.check_keys(node, where, allowed);
}

template <typename T>
T get(const Ctx& c, const YAML::Node& node, const std::string& key, T lo, T hi) {
  return c.in.number<T>(node, key, lo, hi);
}

std::string get_str(const Ctx& c, const YAML::Node& node, const std::string& key) {
  return c.in.string(node, key);
}

bool get_bool(const Ctx& c, const YAML::Node& node, const std::string& key) {
  return c.in.boolean(node, key);
}

std::vector<std::string> get_strings(const Ctx& c, const YAML::Node& node, const std::string& key) {
  return c.in.strings(node, key);
}

// server.consistency (server/consistency.hpp): {policy, quorum, grace_ms, weighting}.
void parse_consistency(const Ctx& c, const YAML::Node& n, ServerConfig& cfg) {
  for (const char* key : {"staleness_bound", "staleness_weighting"})
    GT_REQUIRE(!(n.IsMap() && n[key]),
               "{}: server.consistency.{} is not a key: set server.{} (the ssp bound, read by "
               "servers and workers alike)",
               c.source, key, key);
  check_keys(c, n, "server.consistency", {"policy", "quorum", "grace_ms", "weighting"});
  auto& out = cfg.shard.consistency;
  if (auto p = n["policy"]) {
    const auto policy = get_str(c, p, "server.consistency.policy");
    GT_REQUIRE(policy == "ssp" || policy == "quorum",
               "{}: server.consistency.policy is '{}', allowed: ssp, quorum", c.source, policy);
    out.policy = policy == "ssp" ? ConsistencyPolicy::ssp : ConsistencyPolicy::quorum;
  }
  const auto regions = static_cast<uint32_t>(cfg.regions.size());
  for (const char* key : {"quorum", "grace_ms"})
    GT_REQUIRE(out.is_quorum() || !n[key],
               "{}: server.consistency.{} is set but server.consistency.policy is 'ssp' (it "
               "applies to policy: quorum only)",
               c.source, key);
  // Default: a majority of the configured regions.
  out.quorum = regions / 2 + 1;
  if (auto q = n["quorum"]) {
    // A count of regions ("2"), or a fraction of them ("0.67": the nearest count, at least 1).
    const bool fraction = q.IsScalar() && q.Scalar().find_first_of(".eE") != std::string::npos;
    if (fraction) {
      const double f = get<double>(c, q, "server.consistency.quorum (a fraction)", 0.0, 1.0);
      GT_REQUIRE(f > 0.0, "{}: server.consistency.quorum is {}, allowed: a fraction in (0, 1]",
                 c.source, f);
      out.quorum = std::max<uint32_t>(1, static_cast<uint32_t>(std::lround(f * regions)));
    } else {
      out.quorum = get<uint32_t>(c, q, "server.consistency.quorum (regions)", 1, regions);
    }
  }
  if (auto g = n["grace_ms"])
    out.grace =
        std::chrono::milliseconds(get<int64_t>(c, g, "server.consistency.grace_ms", 0, 3600000));
  out.weighting = out.is_quorum() ? MergeWeighting::tokens : MergeWeighting::equal;
  if (auto w = n["weighting"]) {
    const auto weighting = get_str(c, w, "server.consistency.weighting");
    GT_REQUIRE(weighting == "tokens" || weighting == "equal",
               "{}: server.consistency.weighting is '{}', allowed: tokens, equal", c.source,
               weighting);
    out.weighting = weighting == "tokens" ? MergeWeighting::tokens : MergeWeighting::equal;
  }
}

// server.downlink_codec, server.downlink_codecs (per region) and server.downlink_error_feedback:
// how the server compresses what each region pulls. Each codec is a spec or a schedule of them
// by round (compression/codec_schedule.hpp).
void parse_downlink(const Ctx& c, const YAML::Node& s, ServerConfig& cfg) {
  // A codec that factorises matrices needs to know which tensors are matrices.
  const bool matrices = std::any_of(cfg.tensors.begin(), cfg.tensors.end(),
                                    [](const TensorSpec& t) { return t.cols != 0; });
  const auto downlink = [&](const YAML::Node& n, const std::string& key) {
    auto schedule = compression::CodecSchedule::parse(c.in, n, key);
    GT_REQUIRE(matrices || !schedule.uses_shapes(),
               "{}: {} is '{}': powersgd factorises matrices, but model.tensors gives no tensor's "
               "columns (model.tensors[].cols; a model's kind and preset give them)",
               c.source, key, schedule.text());
    return schedule;
  };
  if (auto n = s["downlink_codec"]) cfg.shard.downlink_codec = downlink(n, "server.downlink_codec");
  if (auto n = s["downlink_codecs"]) {
    check_keys(c, n, "server.downlink_codecs",
               std::set<std::string>(cfg.regions.begin(), cfg.regions.end()));
    for (const auto& kv : n) {
      const auto region = kv.first.as<std::string>();
      const auto key = "server.downlink_codecs." + region;
      cfg.shard.downlink_codec_for[cfg.region_index(region)] = downlink(kv.second, key);
    }
  }
  if (auto ef = s["downlink_error_feedback"]) {
    check_keys(c, ef, "server.downlink_error_feedback", {"decay"});
    if (auto n = ef["decay"]) {
      const std::string key = "server.downlink_error_feedback.decay";
      cfg.shard.downlink_feedback_decay = get<float>(c, n, key, 0.0f, 1.0f);
      compression::require_feedback_decay(cfg.shard.downlink_feedback_decay, c.source + ": " + key);
    }
  }
}

void parse_server(const Ctx& c, const YAML::Node& s, ServerConfig& cfg) {
  check_keys(c, s, "server",
             {"endpoints",
              "shards_per_region",
              "chunk",
              "staleness_bound",
              "staleness_weighting",
              "optimizer",
              "downlink_codec",
              "heartbeat_ms",
              "dead_after_ms",
              "join_within_ms",
              "max_message_bytes",
              "high_water_mark",
              "checkpoint",
              "run_dir",
              "metrics_every_ms",
              "wait_for_all_regions",
              "downlink_codecs",
              "handshake_ms",
              "consistency",
              "metrics_port",
              "metrics_host",
              "max_connections_per_address",
              "downlink_error_feedback",
              "socket_buffer_kib",
              "standby"});
  if (auto n = s["endpoints"]) cfg.endpoints = read_endpoints(c.in, n, cfg.regions);
  cfg.standby = read_standby(c.in, s, cfg.regions);
  if (cfg.standby.on) {
    std::unique_ptr<compression::Codec> codec;
    try {
      codec = compression::make_codec(cfg.standby.codec);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: server.standby.codec: {}", c.source, e.what()));
    }
    GT_REQUIRE(!codec->uses_shape(),
               "{}: server.standby.codec is '{}': a replica is a flat change, and {} factorises "
               "matrices (allowed: fp32 or any codec that does not)",
               c.source, cfg.standby.codec, cfg.standby.codec);
  }

  cfg.shards_per_region =
      read_region_counts(c.in, s, "server", "shards_per_region", cfg.regions, 1, 1, 1024);
  if (auto n = s["chunk"]) cfg.chunk = get<uint64_t>(c, n, "server.chunk", 1, uint64_t{1} << 20);
  if (auto n = s["staleness_weighting"]) {
    auto w = get_str(c, n, "server.staleness_weighting");
    GT_REQUIRE(w == "none" || w == "inverse",
               "{}: server.staleness_weighting is '{}', allowed: none, inverse", c.source, w);
    cfg.shard.weighting = w == "none" ? StalenessWeighting::none : StalenessWeighting::inverse;
  }
  if (auto n = s["consistency"]) parse_consistency(c, n, cfg);
  parse_downlink(c, s, cfg);
  if (auto n = s["heartbeat_ms"])
    cfg.heartbeat =
        std::chrono::milliseconds(get<int64_t>(c, n, "server.heartbeat_ms", 1, 3600000));
  if (auto n = s["dead_after_ms"])
    cfg.dead_after =
        std::chrono::milliseconds(get<int64_t>(c, n, "server.dead_after_ms", 1, 86400000));
  if (auto n = s["join_within_ms"])
    cfg.join_within =
        std::chrono::milliseconds(get<int64_t>(c, n, "server.join_within_ms", 1, 86400000));
  if (auto n = s["wait_for_all_regions"])
    cfg.wait_for_all_regions = get_bool(c, n, "server.wait_for_all_regions");
  if (auto n = s["max_message_bytes"])
    cfg.max_message_bytes = get<int64_t>(c, n, "server.max_message_bytes", 4096, int64_t{1} << 34);
  if (auto n = s["high_water_mark"])
    cfg.high_water_mark = get<int>(c, n, "server.high_water_mark", 1, 100000);
  if (auto n = s["max_connections_per_address"])
    cfg.max_connections_per_address =
        get<uint32_t>(c, n, "server.max_connections_per_address", 0, 1000000);
  if (auto n = s["socket_buffer_kib"])
    cfg.socket_buffer_kib = get<uint32_t>(c, n, "server.socket_buffer_kib", 0, 1u << 20);
  if (auto n = s["handshake_ms"])
    cfg.handshake = std::chrono::milliseconds(get<int>(c, n, "server.handshake_ms", 100, 600000));
  if (auto k = s["checkpoint"]) {
    check_keys(c, k, "server.checkpoint", {"every", "keep", "dir"});
    if (auto n = k["every"])
      cfg.checkpoint.every = get<uint64_t>(c, n, "server.checkpoint.every", 0, uint64_t{1} << 40);
    if (auto n = k["keep"])
      cfg.checkpoint.keep = get<uint32_t>(c, n, "server.checkpoint.keep", 1, 1000);
    if (auto n = k["dir"]) cfg.checkpoint.dir = get_str(c, n, "server.checkpoint.dir");
  }
  if (auto n = s["run_dir"]) cfg.run_dir = get_str(c, n, "server.run_dir");
  if (auto n = s["metrics_every_ms"])
    cfg.metrics_every =
        std::chrono::milliseconds(get<int64_t>(c, n, "server.metrics_every_ms", 10, 3600000));
  if (auto n = s["metrics_port"]) {
    if (n.IsMap()) {
      check_keys(c, n, "server.metrics_port",
                 std::set<std::string>(cfg.regions.begin(), cfg.regions.end()));
      for (const auto& kv : n) {
        const auto region = kv.first.as<std::string>();
        const auto port = get<uint32_t>(c, kv.second, "server.metrics_port." + region, 0, 65535);
        if (port > 0) cfg.metrics_ports[region] = static_cast<uint16_t>(port);
      }
    } else if (n.IsScalar() && n.Scalar() == "auto") {
      for (const auto& r : cfg.regions) cfg.metrics_ports[r] = 0;
    } else {
      const auto port =
          get<uint32_t>(c, n, "server.metrics_port (a port, a map or auto)", 0, 65535);
      if (port > 0)
        for (const auto& r : cfg.regions) cfg.metrics_ports[r] = static_cast<uint16_t>(port);
    }
  }
  if (auto n = s["metrics_host"]) cfg.metrics_host = get_str(c, n, "server.metrics_host");
  GT_REQUIRE(!cfg.standby.on || cfg.standby.takeover_after > cfg.heartbeat,
             "{}: server.standby.takeover_after_ms ({}) must exceed server.heartbeat_ms ({}): a "
             "primary heartbeats its standby once a heartbeat period",
             c.source, cfg.standby.takeover_after.count(), cfg.heartbeat.count());
  GT_REQUIRE(cfg.dead_after > cfg.heartbeat,
             "{}: server.dead_after_ms ({}) must exceed server.heartbeat_ms ({})", c.source,
             cfg.dead_after.count(), cfg.heartbeat.count());
}

}  // namespace

uint32_t ServerConfig::region_index(std::string_view name) const {
  for (size_t i = 0; i < regions.size(); ++i)
    if (regions[i] == name) return static_cast<uint32_t>(i);
  std::string list;
  for (const auto& r : regions) list += (list.empty() ? "" : ", ") + r;
  GT_REQUIRE(false, "region '{}' is not configured (regions: {})", name, list);
  return 0;
}

uint64_t ServerConfig::state_hash(uint64_t table_hash) const {
  uint64_t h = table_hash;
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ull; };
  mix(regions.size());
  // One count for every region hashes as before counts per region.
  const bool uneven = std::adjacent_find(shards_per_region.begin(), shards_per_region.end(),
                                         std::not_equal_to<>()) != shards_per_region.end();
  mix(shards_per_region.empty() ? 1 : shards_per_region.front());
  if (uneven)
    for (auto n : shards_per_region) mix(n);
  mix(chunk);
  mix(shard.optimizer.momentum > 0 ? 1 : 0);
  if (fragments > 1) mix(fragments);  // (one fragment hashes as before fragments existed)
  if (fragments > 1 && !stream_critical) mix(0x6b657074u);  // the kept-out fragment
  return h;
}

ServerConfig parse_server_config(std::string_view yaml_text, std::string_view source) try {
  Ctx c{YamlReader(std::string(source)), std::string(source)};
  const YAML::Node root = c.in.load_deployment_config(yaml_text);
  ServerConfig cfg;
  cfg.regions = read_regions(c.in, root);
  auto model = root["model"];
  GT_REQUIRE(model, "{}: key 'model' is missing (model.tensors: list of {{name, size}})", c.source);
  check_keys(c, model, "model", model_keys());  // all but tensors and critical: cli/'s
  GT_REQUIRE(model["tensors"], "{}: model.tensors must be a list of {{name, size}}", c.source);
  cfg.tensors = read_model_tensors(c.in, model["tensors"]);
  if (auto n = model["critical"]) cfg.critical = get_strings(c, n, "model.critical");
  if (auto s = root["server"]) parse_server(c, s, cfg);
  if (cfg.shards_per_region.empty()) cfg.shards_per_region.assign(cfg.regions.size(), 1);
  // What the servers share with the leaders: the bound, the outer step, the streaming layout
  // (the worker section's fragment count decides the shard map).
  const SharedProtocol shared = read_shared_protocol(c.in, root);
  cfg.shard.staleness_bound = shared.staleness_bound;
  static_cast<OuterStep&>(cfg.shard.optimizer) = shared.outer;
  cfg.fragments = shared.fragments;
  cfg.stream_critical = shared.stream_critical;
  cfg.security = wire::parse_security_config(root["security"], c.in, /*allow_auto=*/false);
  return cfg;
} catch (const YAML::Exception& e) {
  throw yaml_input_error(source, e);  // a check is missing: still an InputError
}

ServerConfig load_server_config(const std::filesystem::path& file) {
  std::ifstream in(file);
  GT_REQUIRE(in.good(), "config file '{}' cannot be read", file.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_server_config(ss.str(), file.string());
}

}  // namespace geotrain::server
