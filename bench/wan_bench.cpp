#include "bench/wan_bench.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "compression/factory.hpp"
#include "core/error.hpp"
#include "netsim/config.hpp"
#include "netsim/probe.hpp"
#include "netsim/proxy.hpp"
#include "wire/channel.hpp"
#include "wire/client.hpp"
#include "wire/curve_keys.hpp"
#include "wire/zap_authenticator.hpp"

#ifndef GEOTRAIN_SOURCE_DIR
#define GEOTRAIN_SOURCE_DIR "."
#endif

namespace geotrain::bench {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Link {
  std::string from, to;
  netsim::LinkProperties properties;
};

Link pick_link(const WanBenchOptions& o) {
  std::filesystem::path path = o.profile;
  if (!o.profile.ends_with(".yaml"))
    path = std::filesystem::path(GEOTRAIN_SOURCE_DIR) / "configs/wan" / (o.profile + ".yaml");
  const auto profile = netsim::load_profile(path);
  if (!o.from.empty() || !o.to.empty()) {
    GT_REQUIRE(!o.from.empty() && !o.to.empty(), "bench wan: give both --from and --to");
    return {o.from, o.to, profile.link(o.from, o.to)};
  }
  GT_REQUIRE(!profile.links.empty(), "bench wan: profile {} lists no links; give --from and --to",
             o.profile);
  auto longest = std::max_element(profile.links.begin(), profile.links.end(), [](auto& a, auto& b) {
    return a.second.delay_ms < b.second.delay_ms;
  });
  return {longest->first.first, longest->first.second, longest->second};
}

// The payload a codec makes of `elements` Gaussian values.
Bytes make_payload(const WanBenchOptions& o) {
  std::vector<float> x(o.elements);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0, 1);
  for (auto& v : x) v = d(rng);
  Bytes out;
  compression::make_codec(o.codec)->encode(x, out);
  return out;
}

wire::Frame copy_of(const Bytes& b) { return wire::Frame(b.data(), b.size()); }

// The remote server's end: a push (a payload frame) is acknowledged once it is all in; a request
// without payload is answered with the payload.
class Server {
 public:
  Server(wire::Context& context, const wire::ChannelOptions& options, const Bytes& payload)
      : payload_(payload), router_(wire::bind_router(context, "tcp://127.0.0.1:0", options)) {
    thread_ = std::thread([this] { loop(); });
  }
  ~Server() {
    stop_ = true;
    thread_.join();
  }
  uint16_t port() const {
    const auto e = router_->endpoint();
    return static_cast<uint16_t>(std::stoi(e.substr(e.rfind(':') + 1)));
  }

 private:
  void loop() {
    while (!stop_) {
      auto env = router_->receive(50ms);
      if (!env) continue;
      const auto h = wire::decode_header(env->frames.front());
      wire::Envelope out{env->peer, {}};
      out.frames.push_back(wire::encode_header(wire::Header{h.request_id, wire::Ack{}}));
      if (env->frames.size() == 1) out.frames.push_back(copy_of(payload_));
      (void)router_->send(std::move(out));
    }
  }
  const Bytes& payload_;
  std::unique_ptr<wire::Channel> router_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct Measured {
  double push_s = 0, pull_s = 0;
};

Measured measure(const Link& link, const WanBenchOptions& o, const Bytes& payload, uint32_t streams,
                 bool curve) {
  wire::Context server_ctx(o.io_threads), client_ctx(o.io_threads);
  wire::ChannelOptions server_opts, client_opts;
  server_opts.max_frame_bytes = client_opts.max_frame_bytes = int64_t{1} << 31;
  server_opts.socket_buffer_bytes = client_opts.socket_buffer_bytes = o.socket_buffer_kib * 1024;
  client_opts.lanes = streams;
  std::unique_ptr<wire::ZapAuthenticator> zap;
  if (curve) {
    const auto server_keys = wire::generate_keypair(), client_keys = wire::generate_keypair();
    zap = std::make_unique<wire::ZapAuthenticator>(
        server_ctx, wire::ZapPolicy{true, {{client_keys.public_key, "bench"}}, 0});
    server_opts.curve_server = wire::ChannelOptions::CurveServer{server_keys.secret_key};
    client_opts.curve_client = wire::ChannelOptions::CurveClient{
        server_keys.public_key, client_keys.public_key, client_keys.secret_key};
  }
  Server server(server_ctx, server_opts, payload);
  netsim::LinkConfig l;
  l.from = link.from;
  l.to = link.to;
  l.target = {"127.0.0.1", server.port()};
  l.properties = link.properties;
  netsim::WanProxy proxy({l}, netsim::ProxyOptions{});
  proxy.start();
  const auto at = proxy.listen_endpoint(0);
  wire::Client client(
      wire::connect_dealer(client_ctx, fmt::format("tcp://{}:{}", at.host, at.port), client_opts));
  auto call = [&](std::vector<wire::Frame> payloads) {
    const auto t0 = Clock::now();
    auto r = client.call(wire::Heartbeat{}, std::move(payloads), 600s);
    GT_REQUIRE(r.has_value(), "bench wan: no reply from the server within 600 s");
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  call({});  // connections and handshakes up; the server's payload copy warm
  std::vector<double> push, pull;
  for (int i = 0; i < o.repeats; ++i) {
    std::vector<wire::Frame> p;
    p.push_back(copy_of(payload));
    push.push_back(call(std::move(p)));
    pull.push_back(call({}));
  }
  proxy.stop();
  return {netsim::median(push), netsim::median(pull)};
}

}  // namespace

int run_wan_bench(const WanBenchOptions& o) {
  const auto link = pick_link(o);
  const auto payload = make_payload(o);
  const auto& p = link.properties;
  const double rtt_s = 2 * p.delay_ms / 1e3;
  const double window_mbps =
      p.window_kib > 0 && rtt_s > 0 ? p.window_kib * 1024 * 8 / 1e6 / rtt_s : 0;
  nlohmann::json doc{{"bench", "wan"},
                     {"profile", o.profile},
                     {"link", link.from + "->" + link.to},
                     {"rtt_ms", 2 * p.delay_ms},
                     {"bandwidth_mbps", p.bandwidth_mbps},
                     {"window_kib", p.window_kib},
                     {"window_limit_mbps", window_mbps},
                     {"codec", o.codec},
                     {"elements", o.elements},
                     {"payload_bytes", payload.size()},
                     {"io_threads", o.io_threads},
                     {"socket_buffer_kib", o.socket_buffer_kib}};
  if (!o.json) {
    std::printf(
        "link %s: RTT %.0f ms, %.0f Mbit/s, window %.0f KiB (one flow: %.0f Mbit/s); "
        "payload %.1f MB (%s)\n",
        (link.from + "->" + link.to).c_str(), 2 * p.delay_ms, p.bandwidth_mbps, p.window_kib,
        window_mbps, static_cast<double>(payload.size()) / 1e6, o.codec.c_str());
    std::printf("%-7s %7s | %8s %9s %7s | %8s %9s %7s | %9s\n", "mode", "streams", "push_s",
                "push_mbps", "of_link", "pull_s", "pull_mbps", "of_link", "streams*W/RTT");
    std::printf(
        "(mbps: payload bits over the time less one RTT, the request's or the "
        "acknowledgement's propagation, which no stream count shortens)\n");
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& mode : o.security) {
    GT_REQUIRE(mode == "plain" || mode == "curve", "bench wan: security '{}': plain or curve",
               mode);
    for (uint32_t n : o.streams) {
      const auto m = measure(link, o, payload, n, mode == "curve");
      const double bits = 8.0 * static_cast<double>(payload.size());
      // Over the transfer: one round trip of every exchange is the request's or the
      // acknowledgement's flight, latency that no stream count shortens.
      auto rate = [&](double s) { return bits / std::max(s - rtt_s, 1e-3) / 1e6; };
      const double push_mbps = rate(m.push_s), pull_mbps = rate(m.pull_s);
      const double bound = window_mbps > 0 ? n * window_mbps : 0;
      auto share = [&](double mbps) { return p.bandwidth_mbps > 0 ? mbps / p.bandwidth_mbps : 0; };
      rows.push_back({{"security", mode},
                      {"streams", n},
                      {"push_s", m.push_s},
                      {"pull_s", m.pull_s},
                      {"push_mbps", push_mbps},
                      {"pull_mbps", pull_mbps},
                      {"push_exchange_mbps", bits / m.push_s / 1e6},
                      {"pull_exchange_mbps", bits / m.pull_s / 1e6},
                      {"push_of_link", share(push_mbps)},
                      {"pull_of_link", share(pull_mbps)},
                      {"window_bound_mbps", bound}});
      if (!o.json) {
        std::printf("%-7s %7u | %8.2f %9.1f %7.2f | %8.2f %9.1f %7.2f | %9.0f\n", mode.c_str(), n,
                    m.push_s, push_mbps, share(push_mbps), m.pull_s, pull_mbps, share(pull_mbps),
                    bound);
        std::fflush(stdout);
      }
    }
  }
  doc["results"] = rows;
  if (o.json) std::printf("%s\n", doc.dump(2).c_str());
  return 0;
}

}  // namespace geotrain::bench
