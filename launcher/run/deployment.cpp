#include "launcher/run/deployment.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "core/error.hpp"
#include "core/yaml_reader.hpp"
#include "netsim/config.hpp"
#include "wire/channel.hpp"
#include "wire/security_config.hpp"

namespace geotrain::launcher {

namespace {
std::string tcp(const std::string& host, uint16_t port) {
  return fmt::format("tcp://{}:{}", host, port);
}

std::string emit(const YAML::Node& node, const std::string& header) {
  YAML::Emitter out;
  out << node;
  return header + out.c_str() + "\n";
}

// The user's `netsim:` section, checked: seed and per-link additions keyed by (from, to).
struct NetsimExtras {
  std::optional<YAML::Node> seed;
  std::optional<YAML::Node> faults_origin;  // faults_origin_unix_s (geotrain chaos sets it)
  std::map<std::pair<std::string, std::string>, YAML::Node> links;
};

NetsimExtras read_netsim_extras(const YAML::Node& root, const YamlReader& in,
                                const RunSettings& s) {
  NetsimExtras extras;
  auto n = root["netsim"];
  if (!n) return extras;
  in.check_keys(n, "netsim", {"seed", "faults_origin_unix_s", "links"});
  if (n["seed"]) extras.seed = n["seed"];
  if (n["faults_origin_unix_s"]) extras.faults_origin = n["faults_origin_unix_s"];
  if (auto links = n["links"]) {
    GT_REQUIRE(links.IsSequence(), "{}: netsim.links must be a list of {{from, to, ...}}",
               in.source());
    for (const auto& l : links) {
      GT_REQUIRE(l.IsMap() && l["from"] && l["to"],
                 "{}: each netsim.links entry needs 'from' and 'to'", in.source());
      const auto from = in.string(l["from"], "netsim.links[].from");
      const auto to = in.string(l["to"], "netsim.links[].to");
      for (const auto* r : {&from, &to}) {
        bool known = false;
        for (const auto& region : s.regions) known |= region == *r;
        GT_REQUIRE(known, "{}: netsim.links[] names region '{}', which is not in regions",
                   in.source(), *r);
      }
      GT_REQUIRE(!l["listen"] && !l["target"],
                 "{}: netsim.links[] {}->{}: listen and target are set by geotrain run",
                 in.source(), from, to);
      extras.links[{from, to}] = static_cast<const YAML::Node&>(l);
    }
  }
  return extras;
}
}  // namespace

const char* to_string(ProcessRole role) {
  switch (role) {
    case ProcessRole::server:
      return "server";
    case ProcessRole::netsim:
      return "netsim";
    case ProcessRole::worker:
      return "worker";
  }
  return "?";
}

namespace {
// The server section as the launcher runs it: every region's endpoint on this machine, the run
// folder, one metrics port per server, and the checkpoints a restart needs.
void resolve_server_section(YAML::Node& root, const YamlReader& in, const RunSettings& s,
                            const std::filesystem::path& run, Deployment& d, PortAllocator& ports) {
  const auto& source = in.source();
  YAML::Node server = root["server"];
  if (!server) server = YAML::Node(YAML::NodeType::Map);
  GT_REQUIRE(server.IsMap(), "{}: 'server' must be a mapping", source);
  YAML::Node endpoints(YAML::NodeType::Map);
  for (const auto& r : s.regions) endpoints[r] = tcp(d.host, d.server_ports[r]);
  server["endpoints"] = endpoints;
  server["run_dir"] = run.string();
  // server.standby (docs/server.md, "Standby shards"): each region's standby listens on a port of
  // its own, in the next region's server process; `on` becomes the mapping with the endpoints.
  if (YAML::Node standby = server["standby"];
      standby && !(standby.IsScalar() && standby.Scalar() == "off")) {
    YAML::Node resolved = standby.IsMap() ? standby : YAML::Node(YAML::NodeType::Map);
    if (!resolved["endpoints"]) {
      YAML::Node at(YAML::NodeType::Map);
      for (const auto& r : s.regions) at[r] = tcp(d.host, ports.allocate());
      resolved["endpoints"] = at;
    }
    server["standby"] = resolved;
  }
  // server.metrics_port (docs/monitoring.md): each server on this machine needs a port of its
  // own. A port P gives the regions P, P + 1, ... in config order (so a fixed scrape config can
  // name them), `auto` free ones; a map is used as written. The resolved config has the map.
  if (YAML::Node m = server["metrics_port"]; m && !(m.IsScalar() && m.Scalar() == "0")) {
    const bool any = m.IsScalar() && m.Scalar() == "auto";
    const uint32_t base =
        any || m.IsMap() ? 0u : in.number<uint32_t>(m, "server.metrics_port", 1, 65535);
    GT_REQUIRE(base == 0 || base + s.regions.size() - 1 <= 65535,
               "{}: server.metrics_port {} leaves no port for each of {} regions", source, base,
               s.regions.size());
    for (size_t i = 0; i < s.regions.size(); ++i) {
      const auto& r = s.regions[i];
      if (m.IsMap()) {
        if (m[r]) {
          const auto port = in.number<uint32_t>(m[r], "server.metrics_port." + r, 0, 65535);
          if (port > 0) d.metrics_ports[r] = static_cast<uint16_t>(port);
        }
      } else {
        d.metrics_ports[r] = any ? ports.allocate() : static_cast<uint16_t>(base + i);
      }
    }
    YAML::Node resolved(YAML::NodeType::Map);
    for (const auto& [r, port] : d.metrics_ports) resolved[r] = port;
    server["metrics_port"] = resolved;
    if (!server["metrics_host"]) server["metrics_host"] = d.host;  // loopback, as the servers
  }
  // run.restart: a restarted server restores its newest checkpoint; without server.checkpoint
  // it would have none, so it checkpoints every released round unless the config says otherwise.
  if (s.restart.enabled() &&
      !(server["checkpoint"] && server["checkpoint"].IsMap() && server["checkpoint"]["every"]))
    server["checkpoint"]["every"] = 1;
  root["server"] = server;
}

// The worker section: the run folder, the metrics endpoints on loopback, the snapshots a restart
// needs, and the routes through netsim to the other regions' servers.
void resolve_worker_section(YAML::Node& root, const YamlReader& in, const RunSettings& s,
                            const std::filesystem::path& run, const Deployment& d) {
  YAML::Node worker = root["worker"];
  if (!worker) worker = YAML::Node(YAML::NodeType::Map);
  GT_REQUIRE(worker.IsMap(), "{}: 'worker' must be a mapping", in.source());
  worker["run_dir"] = run.string();
  // The workers' Prometheus endpoints bind to loopback, as the servers' (one machine).
  if (worker["metrics_port"] && !worker["metrics_host"]) worker["metrics_host"] = d.host;
  // run.restart: a restarted worker group resumes from its snapshots (worker.checkpoint), so
  // every worker snapshots every round unless the config says otherwise.
  if (s.restart.enabled() && !s.external_workers &&
      !(worker["checkpoint"] && worker["checkpoint"].IsMap() && worker["checkpoint"]["every"]))
    worker["checkpoint"]["every"] = 1;
  YAML::Node routes(YAML::NodeType::Map);
  for (const auto& route : d.routes) routes[route.from][route.to] = tcp(d.host, route.listen_port);
  if (!d.routes.empty())
    worker["routes"] = routes;
  else
    worker.remove("routes");
  // worker.streams_per_server auto (or unset) on an emulated WAN: from the profile's links, by
  // the rule a leader applies to what it measures (wire::streams_for_link); a leader here would
  // measure the right round trip but this host's TCP window, not the emulated one.
  const auto streams = worker["streams_per_server"];
  if (s.wan_profile && !d.routes.empty() &&
      (!streams || (streams.IsScalar() && streams.Scalar() == "auto"))) {
    const auto profile = netsim::load_profile(*s.wan_profile);
    uint32_t n = 1;
    for (const auto& route : d.routes) {
      // A pair the profile lacks is named by the netsim check (netsim_config) with the fix.
      if (const auto* p = profile.find_link(route.from, route.to))
        n = std::max(n, wire::streams_for_link(2 * p->delay_ms / 1e3, p->bandwidth_mbps,
                                               p->window_kib * 1024));
    }
    worker["streams_per_server"] = n;
  }
  root["worker"] = worker;
}

// security: CURVE on every server socket. Auto (or unset): on for WAN profiles but lan; keys
// generated in the run folder unless keys_dir names some.
void resolve_security(YAML::Node& root, const YamlReader& in, const RunSettings& s,
                      const std::filesystem::path& run, Deployment& d) {
  const auto security = wire::parse_security_config(root["security"], in, /*allow_auto=*/true);
  const bool automatic = !root["security"] || !root["security"]["curve"] ||
                         security.curve == wire::CurveSetting::automatic;
  d.curve = security.curve == wire::CurveSetting::on;
  if (automatic)
    d.curve = s.regions.size() > 1 && s.wan_profile && !s.external_workers &&
              wire::curve_supported() && netsim::load_profile(*s.wan_profile).name != "lan";
  YAML::Node sec(YAML::NodeType::Map);
  sec["curve"] = d.curve;
  if (d.curve) {
    std::filesystem::path keys = security.keys_dir;
    if (keys.empty()) {
      keys = run / "keys";
      d.keys_to_generate = keys;
    }
    sec["keys_dir"] = std::filesystem::absolute(keys).string();
  }
  root["security"] = sec;
}

// netsim.yaml: one link per ordered pair of regions, listening where the routes point and
// forwarding to the target region's server, with the user's per-link additions; checked by
// netsim's own parser.
std::string netsim_config(const RunSettings& s, const NetsimExtras& extras, const Deployment& d,
                          const std::string& source, const std::filesystem::path& run) {
  YAML::Node n(YAML::NodeType::Map);
  n["profile"] = std::filesystem::absolute(*s.wan_profile).string();
  n["seed"] = extras.seed ? *extras.seed : YAML::Node(1);
  if (extras.faults_origin) n["faults_origin_unix_s"] = *extras.faults_origin;
  n["stats"]["jsonl"] = "netsim.jsonl";
  n["stats"]["interval_s"] = s.netsim_stats_interval_s;
  n["stats"]["log"] = false;
  for (const auto& route : d.routes) {
    YAML::Node link(YAML::NodeType::Map);
    link["from"] = route.from;
    link["to"] = route.to;
    link["listen"] = fmt::format("{}:{}", d.host, route.listen_port);
    link["target"] = fmt::format("{}:{}", d.host, d.server_ports.at(route.to));
    if (auto e = extras.links.find({route.from, route.to}); e != extras.links.end())
      for (const auto& kv : e->second) {
        const auto key = kv.first.as<std::string>();
        if (key != "from" && key != "to") link[key] = kv.second;
      }
    n["links"].push_back(link);
  }
  auto text = emit(n, "# Generated by geotrain run: one link per ordered pair of regions.\n");
  try {
    netsim::parse_netsim_config(text, source + " (netsim links)", run);
  } catch (const InputError& e) {
    GT_REQUIRE(false, "{}: the WAN profile does not fit this config: {}", source, e.what());
  }
  return text;
}

// The processes: a server per region, netsim when there are routes, the workers (unless they
// are external).
std::vector<ProcessSpec> process_specs(const RunSettings& s, const Deployment& d,
                                       const std::string& config_path,
                                       const std::filesystem::path& run) {
  std::vector<ProcessSpec> out;
  for (const auto& r : s.regions)
    out.push_back({"server-" + r,
                   ProcessRole::server,
                   {"server", "--config", config_path, "--region", r},
                   {d.server_ports.at(r)},
                   r,
                   0});
  if (d.netsim_yaml) {
    ProcessSpec p{"netsim",
                  ProcessRole::netsim,
                  {"netsim", "--config", (run / "netsim.yaml").string()},
                  {},
                  "",
                  0};
    for (const auto& route : d.routes) p.health_ports.push_back(route.listen_port);
    out.push_back(p);
  }
  for (const auto& r : s.regions)
    for (uint32_t rank = 0; rank < s.workers.in(r) && !s.external_workers; ++rank)
      out.push_back(
          {fmt::format("worker-{}-{}", r, rank),
           ProcessRole::worker,
           {"worker", "--config", config_path, "--region", r, "--rank", std::to_string(rank)},
           {},
           r,
           rank});
  return out;
}
}  // namespace

Deployment plan_deployment(const std::string& config_text, const std::string& source,
                           const RunSettings& s, const std::filesystem::path& run_dir,
                           PortAllocator& ports) {
  const YamlReader in{source};
  YAML::Node root = in.load_mapping(config_text);
  const auto extras = read_netsim_extras(root, in, s);
  const auto run = std::filesystem::absolute(run_dir);
  const auto config_path = (run / "config.yaml").string();

  Deployment d;
  for (const auto& r : s.regions) d.server_ports[r] = ports.allocate();
  for (const auto& from : s.regions)
    for (const auto& to : s.regions)
      if (from != to) d.routes.push_back({from, to, ports.allocate()});

  // The resolved config: the user's, with what the launcher owns set.
  resolve_server_section(root, in, s, run, d, ports);
  resolve_worker_section(root, in, s, run, d);
  if (s.wan_profile)
    root["run"]["wan_profile"] = std::filesystem::absolute(*s.wan_profile).string();
  root.remove("netsim");  // folded into netsim.yaml
  resolve_security(root, in, s, run, d);
  d.config_yaml = emit(
      root,
      fmt::format("# Resolved by geotrain run from {}: every process of this run read this file.\n",
                  source));
  if (!d.routes.empty()) d.netsim_yaml = netsim_config(s, extras, d, source, run);
  d.processes = process_specs(s, d, config_path, run);
  return d;
}

}  // namespace geotrain::launcher
