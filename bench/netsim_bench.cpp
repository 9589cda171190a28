#include "bench/netsim_bench.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "core/log.hpp"
#include "netsim/config.hpp"
#include "netsim/probe.hpp"
#include "netsim/proxy.hpp"

#ifndef GEOTRAIN_SOURCE_DIR
#define GEOTRAIN_SOURCE_DIR "."
#endif

namespace geotrain::bench {

namespace {

using netsim::LinkProperties;

// A started proxy with one link from -> to, listening on 127.0.0.1 (ephemeral port).
std::unique_ptr<netsim::WanProxy> start_proxy(const std::string& from, const std::string& to,
                                              const netsim::Endpoint& target,
                                              const LinkProperties& props, uint64_t seed) {
  netsim::LinkConfig l;
  l.from = from;
  l.to = to;
  l.target = target;
  l.properties = props;
  netsim::ProxyOptions opts;
  opts.seed = seed;
  auto proxy = std::make_unique<netsim::WanProxy>(std::vector{l}, opts);
  proxy->start();
  return proxy;
}

// The proxy's own cost on a zero-delay link (the splice path): round trips and a bulk transfer
// through it against the same without it. The direct and proxied runs alternate, so load from
// other processes hits both alike; the figures are medians over the rounds and the ratios are to
// the direct figures of this run (absolute rates move with the machine and its load: on two
// cores the proxy's extra thread competes with the sender and the sink).
nlohmann::json measure_proxy_cost(const NetsimBenchOptions& o) {
  auto echo = netsim::make_echo_server();
  netsim::PatternSink sink(9, /*verify=*/false);
  auto echo_link = start_proxy("direct", "proxied", echo->endpoint(), {}, 1);
  auto bulk_link = start_proxy("direct", "proxied", sink.endpoint(), {}, 1);
  const auto bytes = static_cast<uint64_t>(std::clamp(o.seconds, 0.25, 2.0) * (uint64_t{1} << 30));
  netsim::measure_rtts_ms(echo_link->listen_endpoint(0), 200);  // warm-up
  std::vector<double> rtt_direct, rtt_proxied, gbs_direct, gbs_proxied, rtt_ratio, gbs_ratio;
  bool complete = true;  // every transfer arrived whole within its time limit
  for (int round = 0; round < 3; ++round) {
    rtt_direct.push_back(1e3 * netsim::median(netsim::measure_rtts_ms(echo->endpoint(), 300)));
    rtt_proxied.push_back(
        1e3 * netsim::median(netsim::measure_rtts_ms(echo_link->listen_endpoint(0), 300)));
    rtt_ratio.push_back(rtt_proxied.back() / rtt_direct.back());
    const auto d = netsim::bulk_transfer(sink.endpoint(), sink, bytes, 1, 9, 60);
    const auto p = netsim::bulk_transfer(bulk_link->listen_endpoint(0), sink, bytes, 1, 9, 60);
    complete = complete && d.bytes == bytes && p.bytes == bytes;
    gbs_direct.push_back(d.steady_mbps / 8e3);
    gbs_proxied.push_back(p.steady_mbps / 8e3);
    gbs_ratio.push_back(gbs_proxied.back() / gbs_direct.back());
  }
  const double direct_us = netsim::median(rtt_direct), proxied_us = netsim::median(rtt_proxied);
  if (!complete) spdlog::warn("bench netsim: a proxy-cost transfer did not complete in 60 s");
  return {{"rounds", 3},
          {"bytes", bytes},
          {"complete", complete},
          {"rtt_us",
           {{"direct", direct_us},
            {"proxied", proxied_us},
            {"added", proxied_us - direct_us},
            {"ratio", netsim::median(rtt_ratio)}}},
          {"forwarding_gbs",
           {{"direct", netsim::median(gbs_direct)},
            {"proxied", netsim::median(gbs_proxied)},
            {"ratio", netsim::median(gbs_ratio)}}}};
}

nlohmann::json measure_link(const std::string& from, const std::string& to, const LinkProperties& p,
                            const NetsimBenchOptions& o, uint64_t seed) {
  LinkProperties used = p;
  if (used.bandwidth_mbps > o.max_mbps || used.bandwidth_mbps == 0)
    used.bandwidth_mbps = p.bandwidth_mbps == 0 ? 0 : o.max_mbps;
  auto make = [&](const netsim::Endpoint& target, const LinkProperties& props) {
    return start_proxy(from, to, target, props, seed);
  };
  nlohmann::json out{{"link", from + "->" + to}};
  const double rtt_want = 2 * p.delay_ms;
  {
    auto echo = netsim::make_echo_server();
    auto proxy = make(echo->endpoint(), used);
    const int pings =
        static_cast<int>(std::clamp(o.seconds * 1e3 / std::max(rtt_want, 1.0), 5.0, 200.0));
    const double rtt = netsim::median(netsim::measure_rtts_ms(proxy->listen_endpoint(0), pings));
    out["rtt_ms"] = {{"configured", rtt_want},
                     {"measured", rtt},
                     {"pings", pings},
                     {"error_pct", rtt_want > 0 ? 100 * (rtt - rtt_want) / rtt_want : 0.0}};
  }
  const double rtt_s = std::max(rtt_want, 0.05) / 1e3;
  const double window_mbps = p.window_kib > 0 ? p.window_kib * 1024 * 8 / 1e6 / rtt_s : 0;
  {
    // Enough parallel flows that the window does not hide the bandwidth.
    const double rate = used.bandwidth_mbps > 0 ? used.bandwidth_mbps : o.max_mbps * 8;
    const int flows =
        window_mbps > 0
            ? static_cast<int>(std::clamp(std::ceil(1.3 * rate / window_mbps), 1.0, 16.0))
            : 1;
    const auto bytes = static_cast<uint64_t>(rate * 1e6 / 8 * o.seconds / flows);
    netsim::PatternSink sink(seed, /*verify=*/used.bandwidth_mbps > 0);
    auto proxy = make(sink.endpoint(), used);
    const auto r = netsim::bulk_transfer(proxy->listen_endpoint(0), sink, bytes, flows, seed,
                                         30 + 10 * o.seconds);
    out["bandwidth_mbps"] = {
        {"configured", p.bandwidth_mbps},
        {"tested", used.bandwidth_mbps},
        {"measured", r.steady_mbps},
        {"flows", flows},
        {"intact", r.intact},
        {"error_pct", used.bandwidth_mbps > 0
                          ? 100 * (r.steady_mbps - used.bandwidth_mbps) / used.bandwidth_mbps
                          : 0.0}};
  }
  if (p.window_kib > 0) {
    // A sliding window delivers one window per round trip: min(bandwidth, W / RTT).
    const double expect =
        used.bandwidth_mbps > 0 ? std::min(window_mbps, used.bandwidth_mbps) : window_mbps;
    netsim::PatternSink sink(seed + 1);
    auto proxy = make(sink.endpoint(), used);
    // At least ~4 RTTs of data, so the window's rate is what is measured.
    const double secs = std::max(o.seconds, 6 * rtt_s);
    const auto r = netsim::bulk_transfer(proxy->listen_endpoint(0), sink,
                                         static_cast<uint64_t>(expect * 1e6 / 8 * secs), 1,
                                         seed + 1, 30 + 10 * secs);
    // Over whole round trips: the flow arrives in one burst per RTT.
    const double measured = netsim::rate_over_periods_mbps(r.arrivals, rtt_s);
    out["window"] = {{"kib", p.window_kib},
                     {"expected_mbps", expect},
                     {"measured_mbps", measured},
                     {"intact", r.intact},
                     {"error_pct", 100 * (measured - expect) / expect}};
  }
  return out;
}

}  // namespace

int run_netsim_bench(const NetsimBenchOptions& options) {
  const std::filesystem::path dir = options.profiles_dir.empty()
                                        ? std::filesystem::path(GEOTRAIN_SOURCE_DIR) / "configs/wan"
                                        : std::filesystem::path(options.profiles_dir);
  std::vector<std::string> names = options.profiles;
  if (names.empty()) names = {"lan", "us-eu", "global-3", "global-3-100m", "scarce", "gaia"};
  nlohmann::json doc{
      {"bench", "netsim"}, {"seconds", options.seconds}, {"max_mbps", options.max_mbps}};
  nlohmann::json results = nlohmann::json::array();
  uint64_t seed = 1;
  if (options.proxy_cost) {
    doc["proxy"] = measure_proxy_cost(options);
    if (!options.json) {
      const auto& rtt = doc["proxy"]["rtt_us"];
      const auto& fwd = doc["proxy"]["forwarding_gbs"];
      std::printf(
          "proxy, zero delay: round trip %.0f us direct, %.0f us proxied (+%.0f us, %.2fx); "
          "forwarding %.2f GB/s direct, %.2f GB/s proxied (%.2fx)\n\n",
          rtt["direct"].get<double>(), rtt["proxied"].get<double>(), rtt["added"].get<double>(),
          rtt["ratio"].get<double>(), fwd["direct"].get<double>(), fwd["proxied"].get<double>(),
          fwd["ratio"].get<double>());
      std::fflush(stdout);
    }
  }
  if (!options.json) {
    std::printf("%-14s %-28s %9s %9s | %9s %9s %9s | %9s %9s\n", "profile", "link", "rtt_cfg",
                "rtt_meas", "mbps_test", "mbps_meas", "flows", "win_exp", "win_meas");
  }
  for (const auto& name : names) {
    const auto profile = netsim::load_profile(dir / (name + ".yaml"));
    auto links = profile.links;  // plus the link of every other pair (`between: any`), if any
    if (profile.any_pair) links[{"any", "any"}] = *profile.any_pair;
    for (const auto& [pair, props] : links) {
      spdlog::debug("bench netsim: {} {}->{}", name, pair.first, pair.second);
      auto r = measure_link(pair.first, pair.second, props, options, seed++);
      r["profile"] = name;
      if (!options.json) {
        const auto& bw = r["bandwidth_mbps"];
        std::printf("%-14s %-28s %9.2f %9.2f | %9.1f %9.1f %9d | %9s %9s\n", name.c_str(),
                    r["link"].get<std::string>().c_str(), r["rtt_ms"]["configured"].get<double>(),
                    r["rtt_ms"]["measured"].get<double>(), bw["tested"].get<double>(),
                    bw["measured"].get<double>(), bw["flows"].get<int>(),
                    r.contains("window")
                        ? fmt::format("{:.1f}", r["window"]["expected_mbps"].get<double>()).c_str()
                        : "-",
                    r.contains("window")
                        ? fmt::format("{:.1f}", r["window"]["measured_mbps"].get<double>()).c_str()
                        : "-");
        std::fflush(stdout);
      }
      results.push_back(std::move(r));
    }
  }
  doc["links"] = std::move(results);
  if (options.json) std::printf("%s\n", doc.dump(2).c_str());
  return 0;
}

}  // namespace geotrain::bench
