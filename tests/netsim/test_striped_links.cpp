// A leader's striped channel (wire/striped_channel.hpp) across an emulated link whose
// connections are all cut mid-stream (a netsim `reset`): requests in flight then may get no reply,
// as over one connection, but every reply that comes is whole and its own, and once the lanes
// have reconnected every request is answered again.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "tests/netsim/netsim_test_util.hpp"
#include "wire/channel.hpp"
#include "wire/client.hpp"

namespace geotrain::netsim::test {

TEST_CASE("striped over a link that is reset, later requests are answered whole and in order") {
  using namespace std::chrono_literals;
  wire::Context ctx;
  auto router = wire::bind_router(ctx, "tcp://127.0.0.1:0");
  const auto at = router->endpoint();
  const auto port = static_cast<uint16_t>(std::stoi(at.substr(at.rfind(':') + 1)));
  Fault reset;
  reset.kind = FaultKind::reset;
  reset.at_s = 0.6;
  WanProxy proxy({link_to(Endpoint{"127.0.0.1", port}, props(5, 400), {reset})}, ProxyOptions{});
  proxy.start();
  std::atomic<bool> stop{false};
  std::thread echo([&] {  // the server: every request's frames back, under its request id
    while (!stop) {
      auto env = router->receive(20ms);
      if (!env) continue;
      const auto h = wire::decode_header(env->frames.front());
      wire::Envelope out{env->peer, {}};
      out.frames.push_back(wire::encode_header(wire::Header{h.request_id, wire::Ack{}}));
      for (size_t i = 1; i < env->frames.size(); ++i)
        out.frames.push_back(std::move(env->frames[i]));
      (void)router->send(std::move(out));
    }
  });
  wire::ChannelOptions options;
  options.lanes = 4;
  const auto via = proxy.listen_endpoint(0);
  wire::Client client(
      wire::connect_dealer(ctx, fmt::format("tcp://{}:{}", via.host, via.port), options));
  int answered = 0, lost = 0, answered_late = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; std::chrono::steady_clock::now() - start < 2500ms; ++i) {
    std::vector<wire::Frame> payload;
    payload.emplace_back(size_t{3} << 20);  // 3 MiB: every lane carries pieces of it
    std::memset(payload[0].data(), i & 0xFF, payload[0].size());
    auto reply = client.call(wire::Heartbeat{}, std::move(payload), 1500ms);
    if (!reply) {
      ++lost;
      continue;
    }
    ++answered;
    REQUIRE(reply->payloads.size() == 1);
    REQUIRE(reply->payloads[0].size() == size_t{3} << 20);
    const auto* b = static_cast<const uint8_t*>(reply->payloads[0].data());
    CHECK(b[0] == (i & 0xFF));  // its own reply, not another request's
    CHECK(b[reply->payloads[0].size() - 1] == (i & 0xFF));
    if (std::chrono::steady_clock::now() - start > 1800ms) ++answered_late;
  }
  stop = true;
  echo.join();
  CAPTURE(lost);
  CHECK(answered > 3);
  CHECK(answered_late > 0);  // after the reset, the lanes came back
  // The reset cut the connections: the channel saw them break (each lane reconnected once at
  // least). Whether it also dropped bytes queued in netsim depends on where in a call 0.6 s
  // falls (once 0 in a clean-clone run), so that counter is checked where a transfer is always
  // in flight (test_faults, "a reset cuts open connections ...").
  CHECK(client.channel().disconnects() >= 4);
}

}  // namespace geotrain::netsim::test
