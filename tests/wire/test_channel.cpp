#include <doctest/doctest.h>

#include <thread>

#include "core/error.hpp"
#include "wire/channel.hpp"
#include "wire/client.hpp"

using namespace geotrain;
using namespace geotrain::wire;
using namespace std::chrono_literals;

namespace {
// Echo server step: answers one request with the same payloads and request id.
void echo_once(Channel& router) {
  auto env = router.receive(20s);
  REQUIRE(env);
  auto h = decode_header(env->frames.front());
  Envelope out{env->peer, {}};
  out.frames.push_back(encode_header(Header{h.request_id, Ack{}}));
  for (size_t i = 1; i < env->frames.size(); ++i) out.frames.push_back(std::move(env->frames[i]));
  REQUIRE(router.send(std::move(out)));
}

void round_trip(const std::string& bind_at, uint32_t lanes = 1) {
  wire::Context ctx;
  auto router = bind_router(ctx, bind_at);
  ChannelOptions options;
  options.lanes = lanes;
  Client client(connect_dealer(ctx, router->endpoint(), options));
  Bytes big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>(i * 31);
  const Bytes expected = big;
  std::vector<wire::Frame> payloads;
  payloads.push_back(frame_from_bytes(std::move(big)));
  payloads.emplace_back("tail", 4);
  auto id = client.send(Heartbeat{}, std::move(payloads));
  REQUIRE(id);
  echo_once(*router);
  auto reply = client.receive(20s);
  REQUIRE(reply);
  CHECK(reply->header.request_id == *id);
  REQUIRE(reply->payloads.size() == 2);
  auto got = frame_bytes(reply->payloads[0]);
  CHECK(std::equal(got.begin(), got.end(), expected.begin(), expected.end()));
  CHECK(reply->payloads[1].to_string() == "tail");
}
}  // namespace

TEST_CASE("the same protocol runs over inproc:// and tcp:// loopback, multi-frame and intact") {
  round_trip("inproc://echo");
  round_trip("tcp://127.0.0.1:0");
}

TEST_CASE("a message striped over several connections arrives whole, and so does its reply") {
  round_trip("tcp://127.0.0.1:0", 4);
  round_trip("inproc://striped", 3);
}

TEST_CASE("striped and plain peers share a server; each gets its own replies, in order") {
  wire::Context ctx;
  auto router = bind_router(ctx, "tcp://127.0.0.1:0");
  ChannelOptions striped;
  striped.lanes = 8;
  Client a(connect_dealer(ctx, router->endpoint(), striped));
  Client b(connect_dealer(ctx, router->endpoint()));
  // Back-to-back requests of mixed sizes from both: the striped ones reach the server in the
  // order they were sent, whatever lane finishes first.
  std::vector<uint64_t> ids_a, ids_b;
  for (size_t i = 0; i < 12; ++i) {
    std::vector<wire::Frame> payloads;
    payloads.emplace_back(i % 3 == 0 ? size_t{2} << 20 : 100 + i);
    static_cast<uint8_t*>(payloads[0].data())[0] = static_cast<uint8_t>(i);
    auto id = a.send(Heartbeat{}, std::move(payloads));
    REQUIRE(id);
    ids_a.push_back(*id);
    auto idb = b.send(Heartbeat{});
    REQUIRE(idb);
    ids_b.push_back(*idb);
  }
  std::vector<uint64_t> seen_a, seen_b;
  std::string peer_a;
  for (size_t n = 0; n < 24; ++n) {
    auto env = router->receive(20s);
    REQUIRE(env);
    auto h = decode_header(env->frames.front());
    if (env->frames.size() == 2) {
      CHECK(static_cast<uint8_t*>(env->frames[1].data())[0] == seen_a.size());
      seen_a.push_back(h.request_id);
      peer_a = env->peer;
    } else {
      seen_b.push_back(h.request_id);
    }
    Envelope out{env->peer, {}};
    out.frames.push_back(encode_header(Header{h.request_id, Ack{}}));
    for (size_t i = 1; i < env->frames.size(); ++i) out.frames.push_back(std::move(env->frames[i]));
    REQUIRE(router->send(std::move(out)));
  }
  CHECK(seen_a == ids_a);
  CHECK(seen_b == ids_b);
  CHECK(peer_a.size() == 9);  // one peer for the eight connections
  std::vector<uint64_t> replies;
  while (replies.size() < ids_a.size()) {
    auto r = a.receive(20s);
    REQUIRE(r);
    replies.push_back(r->header.request_id);
  }
  CHECK(replies == ids_a);
  // A reply to a striped peer the server never heard from goes nowhere.
  Envelope stray{std::string(9, static_cast<char>(0xFE)), {}};
  stray.frames.push_back(encode_header(Header{1, Ack{}}));
  CHECK_FALSE(router->send(std::move(stray)));
}

TEST_CASE("a dealer refuses a lane count outside 1..64") {
  wire::Context ctx;
  ChannelOptions o;
  o.lanes = 65;
  CHECK_THROWS_WITH_AS(connect_dealer(ctx, "tcp://127.0.0.1:1", o),
                       doctest::Contains("must be in [1, 64]"), InputError);
}

TEST_CASE("a channel refuses endpoints of other transports") {
  wire::Context ctx;
  CHECK_THROWS_WITH_AS(bind_router(ctx, "udp://1.2.3.4:5"), doctest::Contains("is not allowed"),
                       InputError);
  CHECK_THROWS_WITH_AS(connect_dealer(ctx, "tcp://"), doctest::Contains("is not allowed"),
                       InputError);
}

TEST_CASE("a frame above the maximum message size never reaches the server") {
  wire::Context ctx;
  ChannelOptions small;
  small.max_frame_bytes = 4096;
  auto router = bind_router(ctx, "tcp://127.0.0.1:0", small);
  Client client(connect_dealer(ctx, router->endpoint()));
  std::vector<wire::Frame> payloads;
  payloads.emplace_back(size_t{8192});
  REQUIRE(client.send(Heartbeat{}, std::move(payloads)));
  CHECK_FALSE(router->receive(300ms));  // ZMQ_MAXMSGSIZE: the peer is disconnected instead
  // A fresh connection with small frames is served normally.
  Client other(connect_dealer(ctx, router->endpoint()));
  REQUIRE(other.send(Heartbeat{}));
  auto env = router->receive(20s);
  REQUIRE(env);
  CHECK(env->frames.size() == 1);
}

TEST_CASE("receive returns nothing after its timeout when no message arrives") {
  wire::Context ctx;
  auto router = bind_router(ctx, "inproc://quiet");
  CHECK_FALSE(router->receive(10ms));
}

TEST_CASE("the stream count for a link is bandwidth x RTT over the window, from 1 to 16") {
  const double w = 3.0 * 1024 * 1024;
  CHECK(streams_for_link(0.239, 1000, w) == 10);  // 29.9 MB in flight / 3 MiB
  CHECK(streams_for_link(0.080, 1000, w) == 4);
  CHECK(streams_for_link(0.0002, 1000, w) == 1);  // a LAN
  CHECK(streams_for_link(0.239, 1000, 0) == 1);   // no window limit
  CHECK(streams_for_link(2.0, 10000, w) == kMaxAutoStreams);
  CHECK(tcp_window_bytes(0) > 0);
}

TEST_CASE("a socket buffer asked for is what the kernel grants: capped at its maximum") {
  const auto b = effective_socket_buffer(64 << 20);
  if (b.send_max >= 0) CHECK(b.send_bytes == std::min<int64_t>(64 << 20, b.send_max));
  if (b.receive_max >= 0) CHECK(b.receive_bytes == std::min<int64_t>(64 << 20, b.receive_max));
  CHECK(effective_socket_buffer(0).send_bytes == 0);  // the OS default
  // And a channel with one set still carries messages.
  wire::Context ctx;
  ChannelOptions o;
  o.socket_buffer_bytes = 1 << 20;
  auto router = bind_router(ctx, "tcp://127.0.0.1:0", o);
  Client client(connect_dealer(ctx, router->endpoint(), o));
  REQUIRE(client.send(Heartbeat{}));
  CHECK(router->receive(20s));
}

TEST_CASE("a DEALER counts the connections that broke; a ROUTER and inproc count none") {
  using namespace std::chrono_literals;
  wire::Context ctx;
  auto router = wire::bind_router(ctx, "tcp://127.0.0.1:0");
  const auto at = router->endpoint();
  auto dealer = wire::connect_dealer(ctx, at);
  // A round trip: the connection is up.
  wire::Envelope hello{{}, {}};
  hello.frames.emplace_back(std::string("hi"));
  REQUIRE(dealer->send(std::move(hello)));
  REQUIRE(router->receive(5s).has_value());
  CHECK(dealer->disconnects() == 0);
  router.reset();  // the server's end goes away
  uint64_t seen = 0;
  for (int i = 0; i < 500 && seen == 0; ++i) {
    std::this_thread::sleep_for(10ms);
    seen = dealer->disconnects();
  }
  CHECK(seen == 1);
  auto local = wire::bind_router(ctx, "inproc://disconnects");
  CHECK(local->disconnects() == 0);
}
