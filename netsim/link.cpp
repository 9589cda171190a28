#include "netsim/link.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace geotrain::netsim {

namespace {
void require_nonneg(const LinkConfig& l, const char* field, double v) {
  GT_REQUIRE(std::isfinite(v) && v >= 0, "link {}: {} is {}, must be a number >= 0", l.name(),
             field, v);
}
}  // namespace

double effective_burst_bytes(const LinkProperties& p) {
  if (p.burst_kib > 0) return p.burst_kib * 1024;
  return std::max(16.0 * 1024, bytes_per_s(p) * 0.005);
}

const char* to_string(FaultKind kind) {
  switch (kind) {
    case FaultKind::partition:
      return "partition";
    case FaultKind::reset:
      return "reset";
    case FaultKind::set:
      return "set";
    case FaultKind::blackhole:
      return "blackhole";
  }
  return "?";
}

const char* to_string(JitterDistribution d) {
  return d == JitterDistribution::uniform ? "uniform" : "normal";
}

void validate(const LinkConfig& l) {
  const auto& p = l.properties;
  require_nonneg(l, "delay_ms", p.delay_ms);
  require_nonneg(l, "jitter_ms", p.jitter_ms);
  require_nonneg(l, "bandwidth_mbps", p.bandwidth_mbps);
  require_nonneg(l, "burst_kib", p.burst_kib);
  require_nonneg(l, "window_kib", p.window_kib);
  GT_REQUIRE(p.window_kib == 0 || p.window_kib >= 1, "link {}: window_kib is {}, must be 0 or >= 1",
             l.name(), p.window_kib);
  for (const Fault& f : l.faults) {
    require_nonneg(l, "fault at_s", f.at_s);
    if (f.until_s) {
      GT_REQUIRE(*f.until_s > f.at_s, "link {}: {} fault until_s is {}, must be after at_s {}",
                 l.name(), to_string(f.kind), *f.until_s, f.at_s);
    }
    GT_REQUIRE(f.kind != FaultKind::partition || f.until_s,
               "link {}: partition fault at {} s needs until_s", l.name(), f.at_s);
    for (const auto* v : {&f.delay_ms, &f.jitter_ms, &f.bandwidth_mbps, &f.window_kib}) {
      if (*v) require_nonneg(l, "fault value", **v);
    }
  }
}

}  // namespace geotrain::netsim
