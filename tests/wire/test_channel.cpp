#include <doctest/doctest.h>

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

void round_trip(const std::string& bind_at) {
  zmq::context_t ctx;
  auto router = bind_router(ctx, bind_at);
  Client client(connect_dealer(ctx, router->endpoint()));
  Bytes big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>(i * 31);
  const Bytes expected = big;
  std::vector<zmq::message_t> payloads;
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

TEST_CASE("a channel refuses endpoints of other transports") {
  zmq::context_t ctx;
  CHECK_THROWS_WITH_AS(bind_router(ctx, "udp://1.2.3.4:5"), doctest::Contains("is not allowed"),
                       InputError);
  CHECK_THROWS_WITH_AS(connect_dealer(ctx, "tcp://"), doctest::Contains("is not allowed"),
                       InputError);
}

TEST_CASE("a frame above the maximum message size never reaches the server") {
  zmq::context_t ctx;
  ChannelOptions small;
  small.max_frame_bytes = 4096;
  auto router = bind_router(ctx, "tcp://127.0.0.1:0", small);
  Client client(connect_dealer(ctx, router->endpoint()));
  std::vector<zmq::message_t> payloads;
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
  zmq::context_t ctx;
  auto router = bind_router(ctx, "inproc://quiet");
  CHECK_FALSE(router->receive(10ms));
}
