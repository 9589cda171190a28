// The server's metrics in the Prometheus text exposition format (version 0.0.4), what its
// `server.metrics_port` endpoint serves (wire/metrics_endpoint.hpp, docs/monitoring.md).
//
// prometheus_text() renders a server's stats (ParamServer's StatsRequest JSON: the counters of
// server/metrics.hpp, membership, shards, CURVE) with Prometheus names: counters end in _total,
// bytes and seconds are in base units, every geotrain_ series carries a `server` label (the
// region the server belongs to) and per-region series a `region` label (the region a push or
// pull came from). The standard process_* metrics come from wire/prometheus.hpp.
// Pure functions apart from the /proc reads; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "wire/prometheus.hpp"

namespace geotrain::server {

std::string prometheus_text(const nlohmann::json& stats, const wire::ProcessStats& process);

}  // namespace geotrain::server
