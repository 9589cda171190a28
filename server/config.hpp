// ServerConfig: everything a server process needs, parsed from the shared YAML config.
//
//   regions: [us-east, eu-west]          # order = region index; every process sees the same list
//   model:
//     tensors: [{name: w, size: 4096}, ...]
//     critical: ["*norm*"]               # glob patterns: these tensors are synchronous per round
//   server: { endpoints: {us-east: "tcp://127.0.0.1:7101", ...}, staleness_bound: 2, ... }
//
// Keys of `server` and their defaults are listed in docs/server.md. Unknown keys in `model` and
// `server` are errors; of the worker section only `fragments` and `stream_critical` are read
// here (they decide the shard map); the rest of it, netsim and run are other processes' own. Every
// error names the key, the value and what is allowed (InputError). Plain struct; parsing does not
// block beyond reading the file.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/deployment_keys.hpp"
#include "core/param_table.hpp"
#include "server/shard.hpp"
#include "wire/security_config.hpp"

namespace geotrain::server {

struct CheckpointConfig {
  uint64_t every = 0;                         // rounds between checkpoints; 0 = only on request
  uint32_t keep = 3;                          // newest checkpoints kept
  std::filesystem::path dir = "checkpoints";  // relative paths are under run_dir
};

struct ServerConfig {
  std::vector<std::string> regions;
  std::vector<TensorSpec> tensors;
  std::vector<std::string> critical;
  std::map<std::string, std::string> endpoints;  // region -> endpoint its server binds
  // server.shards_per_region: each region's shards of every fragment, parallel to `regions`
  // (one count for every region, or {region: count}); its server holds that share of the model.
  std::vector<uint32_t> shards_per_region;
  // Streaming fragments (the worker's `worker.fragments`, read by read_shared_protocol like the
  // workers read it, so that servers and leaders cut the same shards): every shard lies inside
  // one fragment (server/shard_map.hpp).
  uint32_t fragments = 1;
  // worker.stream_critical: false keeps the critical tensors out of the P fragments, in a
  // fragment of their own exchanged every round (with fragments > 1 only).
  bool stream_critical = true;
  uint64_t chunk = 1024;
  ShardSettings shard;
  std::chrono::milliseconds heartbeat{1000};
  std::chrono::milliseconds dead_after{10000};
  // server.join_within_ms: how long after the server's start a region may take to say its first
  // hello (a worker's start-up: a large model's initialisation and data take longer than
  // dead_after). The larger of it and dead_after applies.
  std::chrono::milliseconds join_within{120000};
  // Count every configured region from the start (a region that never registers is declared dead
  // after join_within); false: a region counts only once it has registered.
  bool wait_for_all_regions = true;
  int64_t max_message_bytes = int64_t{256} << 20;
  int high_water_mark = 64;
  // server.socket_buffer_kib: SO_SNDBUF/SO_RCVBUF of every accepted connection; 0: the OS
  // default (autotuned). The kernel caps it at net.core.wmem_max / rmem_max.
  uint32_t socket_buffer_kib = 0;
  // ZMQ_HANDSHAKE_IVL: a connection that has not finished its handshake by then is closed.
  std::chrono::milliseconds handshake{10000};
  // Open connections one peer address may hold (ZAP, wire/zap_authenticator.hpp); 0: no cap.
  uint32_t max_connections_per_address = 256;
  wire::SecurityConfig security;  // top-level `security:` (CURVE)
  CheckpointConfig checkpoint;
  StandbySettings standby;  // server.standby (core/deployment_keys.hpp; docs/server.md)
  std::filesystem::path run_dir = "runs/server";
  std::chrono::milliseconds metrics_every{5000};
  // server.metrics_port (docs/monitoring.md): the Prometheus endpoint, GET /metrics over HTTP.
  // A port for every server, {region: port}, or `auto` (any free port, logged); 0 or absent:
  // none. Region -> port here (0: any free one); a region not in the map serves none.
  std::map<std::string, uint16_t> metrics_ports;
  std::string metrics_host = "0.0.0.0";  // server.metrics_host: the address it binds

  // Index of a region name; InputError naming the allowed names otherwise.
  uint32_t region_index(std::string_view name) const;
  // Hash of what a checkpoint depends on: table layout, shard map, optimizer kind.
  uint64_t state_hash(uint64_t table_hash) const;
};

ServerConfig parse_server_config(std::string_view yaml_text, std::string_view source = "<config>");
ServerConfig load_server_config(const std::filesystem::path& file);

}  // namespace geotrain::server
