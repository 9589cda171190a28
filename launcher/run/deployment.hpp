// Deployment: what `geotrain run` starts for one config on this machine, as plain data.
//
// plan_deployment() takes the user's config, allocates loopback ports and returns:
//  - the resolved config every process gets (`config.yaml` in the run folder): server
//    endpoints on loopback, `server.run_dir` and `worker.run_dir` = the run folder, and
//    `worker.routes` so that every inter-region connection (a region's leader to another
//    region's server) goes through netsim, while a region reaches its own server directly;
//  - the netsim config (`netsim.yaml`): one directed link per ordered pair of regions, with the
//    WAN profile's properties, listening on a fresh port and forwarding to the target region's
//    server; statistics to `netsim.jsonl`. An optional top-level `netsim:` section in the user's
//    config adds `seed`, `faults_origin_unix_s` (fault times count from that Unix time, so that a
//    restarted netsim keeps its schedule) and per-link overrides/faults
//    (`links: [{from, to, delay_ms, faults}]`);
//  - security: `security.curve` true, false or auto (the default): auto turns CURVE on for a
//    WAN profile other than `lan` (and not for external workers). With CURVE on and no
//    `security.keys_dir`, keys are generated into <run>/keys (keys_to_generate);
//  - the processes, in start order: servers, netsim, then workers, each with its arguments
//    (without the binary) and the ports that must accept connections before it counts as up.
// Pure apart from port allocation; the netsim part is checked with netsim's own parser.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/run/port_allocator.hpp"
#include "launcher/run/run_settings.hpp"

namespace geotrain::launcher {

enum class ProcessRole { server, netsim, worker };

struct ProcessSpec {
  std::string name;  // "server-us-east", "netsim", "worker-us-east-0": log file stem
  ProcessRole role = ProcessRole::worker;
  std::vector<std::string> args;       // after the binary
  std::vector<uint16_t> health_ports;  // must accept TCP connections once it is up
  std::string region;                  // servers and workers
  uint32_t rank = 0;                   // workers
};

struct NetsimRoute {
  std::string from, to;
  uint16_t listen_port = 0;
};

struct Deployment {
  std::string host = "127.0.0.1";
  std::map<std::string, uint16_t> server_ports;   // region -> its server's port
  std::map<std::string, uint16_t> metrics_ports;  // region -> its GET /metrics port, if any
  std::vector<NetsimRoute> routes;                // one per ordered pair of distinct regions
  std::string config_yaml;                        // written to <run>/config.yaml
  std::optional<std::string> netsim_yaml;         // written to <run>/netsim.yaml (> 1 region)
  std::vector<ProcessSpec> processes;             // start order
  // security (docs/deploy.md): whether the run uses CURVE, and the keys folder to fill before
  // anything starts (set when CURVE is on and the config names no security.keys_dir).
  bool curve = false;
  std::optional<std::filesystem::path> keys_to_generate;
};

Deployment plan_deployment(const std::string& config_text, const std::string& source,
                           const RunSettings& settings, const std::filesystem::path& run_dir,
                           PortAllocator& ports);

const char* to_string(ProcessRole role);

}  // namespace geotrain::launcher
