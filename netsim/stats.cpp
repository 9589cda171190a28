#include "netsim/stats.hpp"

namespace geotrain::netsim {

namespace {
nlohmann::json lane_record(const LaneStats& before, const LaneStats& now, double dt_s) {
  const double bytes = static_cast<double>(now.bytes - before.bytes);
  const uint64_t chunks = now.chunks - before.chunks;
  const double queue_ms = chunks == 0
                              ? 0.0
                              : static_cast<double>(now.queue_ns_sum - before.queue_ns_sum) / 1e6 /
                                    static_cast<double>(chunks);
  return {{"bytes", now.bytes},
          {"mbps", dt_s > 0 ? bytes * 8 / 1e6 / dt_s : 0.0},
          {"queue_ms_mean", queue_ms},
          {"queue_ms_max", static_cast<double>(now.queue_ns_max) / 1e6}};
}
}  // namespace

nlohmann::json interval_record(const LinkStats& before, const LinkStats& now, double t_s,
                               double dt_s) {
  return {{"t_s", t_s},
          {"link", now.name},
          {"connections_open", now.connections_open},
          {"connections_total", now.connections_total},
          {"bytes_dropped", now.bytes_dropped},
          {"forward", lane_record(before.forward, now.forward, dt_s)},
          {"reverse", lane_record(before.reverse, now.reverse, dt_s)}};
}

}  // namespace geotrain::netsim
