// server/parked_requests: the bounds on waiting requests and the order of retries, without a
// server around it (tests/server/test_security.cpp drives the bounds through one).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <set>

#include "server/parked_requests.hpp"

using namespace geotrain;
using server::ParkedRequests;

namespace {
wire::Envelope from(const std::string& peer, const std::string& tag) {
  wire::Envelope e{peer, {}};
  e.frames.emplace_back(tag.data(), tag.size());
  return e;
}
std::string tag(const ParkedRequests::Request& r) { return r.envelope.frames.front().to_string(); }
}  // namespace

TEST_CASE(
    "a peer parks at most the protocol's waiting requests; unregistered peers share a bound") {
  ParkedRequests parked;
  const ParkedRequests::TimePoint t0{};
  const std::set<std::string> regions{"leader-a", "leader-b"};
  const auto registered = [&](const std::string& p) { return regions.count(p) > 0; };
  for (size_t i = 0; i < wire::kMaxWaitingPerPeer; ++i)
    CHECK_FALSE(parked.park(from("leader-a", fmt::format("r{}", i)), t0, registered));
  const auto busy = parked.park(from("leader-a", "one more"), t0, registered);
  REQUIRE(busy.has_value());
  CHECK(*busy == "4 requests already wait at this server, limit 4");
  // Unregistered peers (many connections of a key-value client) fill their shared bound ...
  size_t n = 0;
  while (!parked.park(from(fmt::format("kv-{}", n), "get"), t0, registered)) ++n;
  CHECK(n == server::kMaxParkedUnregistered);
  // ... and a region's requests are not refused for theirs.
  CHECK_FALSE(parked.park(from("leader-b", "push"), t0, registered));
  CHECK(parked.size() == wire::kMaxWaitingPerPeer + server::kMaxParkedUnregistered + 1);
  CHECK(parked.take_peer("leader-a").size() == wire::kMaxWaitingPerPeer);
  CHECK(parked.size() == server::kMaxParkedUnregistered + 1);
}

TEST_CASE("a server holding more shards holds a push and a pull of each, at least 4") {
  CHECK(wire::max_waiting_per_peer(1) == 4);
  CHECK(wire::max_waiting_per_peer(2) == 4);
  CHECK(wire::max_waiting_per_peer(7) == 14);  // shards_per_region {.., eu-west: 7, ..}
  ParkedRequests parked(wire::max_waiting_per_peer(3));
  const auto registered = [](const std::string&) { return true; };
  for (size_t i = 0; i < 6; ++i)
    CHECK_FALSE(parked.park(from("leader-a", fmt::format("r{}", i)), {}, registered));
  const auto busy = parked.park(from("leader-a", "one more"), {}, registered);
  REQUIRE(busy.has_value());
  CHECK(*busy == "6 requests already wait at this server, limit 6");
}

TEST_CASE("retries go oldest first and start again after each request that finishes") {
  ParkedRequests parked;
  const auto any = [](const std::string&) { return true; };
  for (const char* t : {"a", "b", "c"}) CHECK_FALSE(parked.park(from("p", t), {}, any));
  // "c" finishes first and releases "a"; "b" never finishes.
  std::vector<std::string> offered;
  bool c_done = false;
  parked.retry([&](ParkedRequests::Request& r) {
    offered.push_back(tag(r));
    if (tag(r) == "c") return c_done = true;
    return tag(r) == "a" && c_done;
  });
  CHECK(offered == std::vector<std::string>{"a", "b", "c", "a", "b"});
  REQUIRE(parked.size() == 1);
  CHECK(tag(parked.take_peer("p").front()) == "b");
}
