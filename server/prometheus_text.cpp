#include "server/prometheus_text.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "core/version.hpp"
#include "wire/prometheus.hpp"

namespace geotrain::server {

namespace {

using Labels = wire::PrometheusLabels;
using wire::Exposition;

// Integers exactly (a uint64 counter beyond 2^53 keeps its digits); other numbers as doubles.
std::string number(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
  if (v.is_number()) return fmt::format("{}", v.get<double>());
  return "NaN";
}

std::string number(double v) { return wire::prometheus_number(v); }

Labels with(Labels labels, std::string key, std::string value) {
  labels.emplace_back(std::move(key), std::move(value));
  return labels;
}

// Per-region counters of ServerMetrics::snapshot(): JSON key, metric name, type, help.
struct RegionCounter {
  const char* key;
  const char* name;
  const char* help;
};
constexpr RegionCounter kRegionCounters[] = {
    {"pushes", "geotrain_pushes_total", "Pushes accepted from the region."},
    {"pulls", "geotrain_pulls_total", "Pulls answered to the region."},
    {"bytes_in", "geotrain_received_bytes_total",
     "Payload bytes of the pushes accepted from the region."},
    {"bytes_out", "geotrain_sent_bytes_total", "Payload bytes of the pulls sent to the region."},
    {"errors", "geotrain_error_replies_total", "Error replies sent to the region."},
    {"gate_waits", "geotrain_gate_waits_total",
     "Pushes of the region that waited at the staleness gate."},
    {"rounds_sat_out", "geotrain_rounds_sat_out_total",
     "Rounds the region sat out: its pushes skipped them, or said it was absent (a shard deferred "
     "past them)."},
};

}  // namespace

namespace {

void add_server_metrics(Exposition& out, const Labels& server, const nlohmann::json& stats) {
  out.family("geotrain_server_info", "gauge", "Always 1; labels name the server and version.");
  out.sample("geotrain_server_info", with(server, "version", kVersion), "1");
  out.family("geotrain_rounds_released_total", "counter",
             "Rounds released, summed over the server's shards.");
  out.sample("geotrain_rounds_released_total", server,
             number(stats.value("applied_rounds", nlohmann::json(0))));
  out.family("geotrain_parked_requests", "gauge",
             "Requests waiting at the server (the staleness gate, unreleased rounds).");
  out.sample("geotrain_parked_requests", server, number(stats.value("parked", nlohmann::json(0))));
}

// Per region: live and registered, the counters, the gate's wait, the staleness histogram.
void add_region_metrics(Exposition& out, const Labels& server, const nlohmann::json& regions) {
  uint64_t live = 0;
  for (const auto& [name, r] : regions.items())
    if (r.value("live", false)) ++live;
  out.family("geotrain_regions_live", "gauge", "Regions the server counts as live.");
  out.sample("geotrain_regions_live", server, std::to_string(live));
  out.family("geotrain_region_live", "gauge", "1 if the server counts the region as live.");
  for (const auto& [name, r] : regions.items())
    out.sample("geotrain_region_live", with(server, "region", name),
               r.value("live", false) ? "1" : "0");
  out.family("geotrain_region_registered", "gauge",
             "1 if the region's leader is registered with the server.");
  for (const auto& [name, r] : regions.items())
    out.sample("geotrain_region_registered", with(server, "region", name),
               r.value("registered", false) ? "1" : "0");

  for (const auto& c : kRegionCounters) {
    out.family(c.name, "counter", c.help);
    for (const auto& [name, r] : regions.items())
      if (r.contains(c.key)) out.sample(c.name, with(server, "region", name), number(r[c.key]));
  }
  out.family("geotrain_gate_wait_seconds_total", "counter",
             "Time the region's pushes waited at the staleness gate.");
  for (const auto& [name, r] : regions.items())
    if (r.contains("gate_wait_us"))
      out.sample("geotrain_gate_wait_seconds_total", with(server, "region", name),
                 number(r["gate_wait_us"].get<double>() / 1e6));

  // The staleness histogram: bucket tau of the snapshot counts pushes of staleness tau (0..s).
  out.family("geotrain_push_staleness", "histogram",
             "Staleness (rounds behind the newest) of the region's accepted pushes.");
  for (const auto& [name, r] : regions.items()) {
    if (!r.contains("staleness_histogram")) continue;
    const auto labels = with(server, "region", name);
    uint64_t cumulative = 0, sum = 0;
    const auto& h = r["staleness_histogram"];
    for (size_t tau = 0; tau < h.size(); ++tau) {
      const auto n = h[tau].get<uint64_t>();
      cumulative += n;
      sum += n * tau;
      out.sample("geotrain_push_staleness_bucket", with(labels, "le", std::to_string(tau)),
                 std::to_string(cumulative));
    }
    out.sample("geotrain_push_staleness_bucket", with(labels, "le", "+Inf"),
               std::to_string(cumulative));
    out.sample("geotrain_push_staleness_sum", labels, std::to_string(sum));
    out.sample("geotrain_push_staleness_count", labels, std::to_string(cumulative));
  }
}

void add_shard_metrics(Exposition& out, const Labels& server, const nlohmann::json& shards) {
  out.family("geotrain_shard_version", "gauge", "Version of the shard's values.");
  for (const auto& s : shards)
    out.sample("geotrain_shard_version", with(server, "shard", number(s["id"])),
               number(s["version"]));
  out.family("geotrain_shard_released_round", "gauge", "Newest round the shard released.");
  for (const auto& s : shards)
    out.sample("geotrain_shard_released_round", with(server, "shard", number(s["id"])),
               number(s["released_round"]));
}

// CURVE admission and the connection cap.
void add_connection_metrics(Exposition& out, const Labels& server, const nlohmann::json& stats) {
  if (stats.contains("curve")) {
    const auto& c = stats["curve"];
    const std::pair<const char*, const char*> counters[] = {
        {"accepted", "CURVE connections whose client key was admitted."},
        {"refused_key", "CURVE connections refused for an unknown client key."},
        {"failed_handshakes", "CURVE handshakes that failed."}};
    for (const auto& [key, help] : counters) {
      if (!c.contains(key)) continue;
      const auto name = fmt::format("geotrain_curve_{}_total", key);
      out.family(name, "counter", help);
      out.sample(name, server, number(c[key]));
    }
    if (c.contains("connections_open")) {
      out.family("geotrain_curve_connections_open", "gauge", "CURVE connections open now.");
      out.sample("geotrain_curve_connections_open", server, number(c["connections_open"]));
    }
  }

  if (stats.contains("connections")) {
    const auto& c = stats["connections"];
    if (c.contains("open")) {
      out.family("geotrain_connections_open", "gauge", "Connections open now (all addresses).");
      out.sample("geotrain_connections_open", server, number(c["open"]));
    }
    if (c.contains("refused_over_cap")) {
      out.family("geotrain_connections_refused_over_cap_total", "counter",
                 "Handshakes refused: their address held server.max_connections_per_address.");
      out.sample("geotrain_connections_refused_over_cap_total", server,
                 number(c["refused_over_cap"]));
    }
  }
}

}  // namespace

std::string prometheus_text(const nlohmann::json& stats, const wire::ProcessStats& process) {
  Exposition out;
  const Labels server{{"server", stats.value("server", std::string())}};
  add_server_metrics(out, server, stats);
  add_region_metrics(out, server,
                     stats.contains("regions") ? stats["regions"] : nlohmann::json::object());
  if (stats.contains("shards")) add_shard_metrics(out, server, stats["shards"]);
  add_connection_metrics(out, server, stats);
  wire::add_process_metrics(out, process);
  return out.take();
}

}  // namespace geotrain::server
