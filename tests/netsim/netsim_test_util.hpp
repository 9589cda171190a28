// Helpers for the netsim suites: one-link proxies in front of loopback probe servers.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "netsim/probe.hpp"
#include "netsim/proxy.hpp"

namespace geotrain::netsim::test {

inline LinkConfig link_to(const Endpoint& target, const LinkProperties& p,
                          std::vector<Fault> faults = {}) {
  // Built in place: assigning string literals here trips a GCC 12 -Wrestrict false positive.
  return LinkConfig{.from = "a",
                    .to = "b",
                    .listen = {"127.0.0.1", 0},
                    .target = target,
                    .properties = p,
                    .faults = std::move(faults)};
}

// A started one-link proxy; `via()` is where clients connect.
struct OneLink {
  WanProxy proxy;
  OneLink(const Endpoint& target, const LinkProperties& p, std::vector<Fault> faults = {})
      : proxy({link_to(target, p, std::move(faults))}, ProxyOptions{}) {
    proxy.start();
  }
  Endpoint via() const { return proxy.listen_endpoint(0); }
};

inline LinkProperties props(double delay_ms, double mbps = 0, double window_kib = 0) {
  LinkProperties p;
  p.delay_ms = delay_ms;
  p.bandwidth_mbps = mbps;
  p.window_kib = window_kib;
  return p;
}

inline uint64_t bytes_for(double mbps, double seconds) {
  return static_cast<uint64_t>(mbps * 1e6 / 8 * seconds);
}

}  // namespace geotrain::netsim::test
