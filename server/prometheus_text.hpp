// The server's metrics in the Prometheus text exposition format (version 0.0.4), what its
// `server.metrics_port` endpoint serves (server/metrics_endpoint.hpp, docs/monitoring.md).
//
// prometheus_text() renders a server's stats (ParamServer's StatsRequest JSON: the counters of
// server/metrics.hpp, membership, shards, CURVE) with Prometheus names: counters end in _total,
// bytes and seconds are in base units, every geotrain_ series carries a `server` label (the
// region the server belongs to) and per-region series a `region` label (the region a push or
// pull came from). The standard process_* metrics (resident memory, CPU seconds, open files,
// start time) are read from /proc on Linux, and left out where it cannot be read.
// Pure functions apart from the /proc reads; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace geotrain::server {

struct ProcessStats {
  std::optional<double> resident_bytes, virtual_bytes, cpu_seconds, open_fds, start_time_seconds;
};

// This process's statistics from /proc (each one absent where it cannot be read).
ProcessStats read_process_stats();

std::string prometheus_text(const nlohmann::json& stats, const ProcessStats& process);

// A label value escaped as the format requires (backslash, double quote, newline).
std::string prometheus_label_value(const std::string& value);

}  // namespace geotrain::server
