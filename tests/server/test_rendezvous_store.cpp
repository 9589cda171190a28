// server/rendezvous_store: the workers' key-value exchange, its limits and its errors, without a
// server around it (tests/server/test_membership.cpp and test_security.cpp drive it through one).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>

#include "server/rendezvous_store.hpp"

using namespace geotrain;
using server::RendezvousStore;

namespace {
Bytes bytes(const std::string& s) {
  Bytes b(s.size());
  std::transform(s.begin(), s.end(), b.begin(), [](char c) { return static_cast<std::byte>(c); });
  return b;
}

// The WireError's code and message of a call, or none.
template <typename F>
std::pair<wire::ErrorCode, std::string> refusal(F&& f) {
  try {
    f();
  } catch (const wire::WireError& e) {
    return {e.code(), e.what()};
  }
  return {wire::ErrorCode::malformed, "no error"};
}
}  // namespace

TEST_CASE("a key set is got back, a key not set waits, a key set again is replaced") {
  RendezvousStore kv;
  CHECK(RendezvousStore::handles(wire::KvGet{"k"}));
  CHECK_FALSE(RendezvousStore::handles(wire::Heartbeat{}));
  CHECK_FALSE(kv.get(wire::KvGet{"gloo/a/0"}, {}, 1).has_value());
  kv.set(wire::KvSet{"gloo/a/0", bytes("10.0.0.1:4000")}, {}, 2);
  CHECK(kv.get(wire::KvGet{"gloo/a/0"}, {}, 3) == bytes("10.0.0.1:4000"));
  kv.set(wire::KvSet{"gloo/a/0", bytes("10.0.0.2:4000")}, {}, 4);
  CHECK(kv.get(wire::KvGet{"gloo/a/0"}, {}, 5) == bytes("10.0.0.2:4000"));
  CHECK(kv.size() == 1);
}

TEST_CASE("the store refuses what breaks its limits, naming them, and changes nothing") {
  RendezvousStore kv;
  auto [code, what] = refusal([&] { kv.set(wire::KvSet{"", bytes("x")}, {}, 7); });
  CHECK(code == wire::ErrorCode::too_large);
  CHECK(what.find("kvSet key of 0 bytes / value of 1 bytes: limits are 1-256 / 65536") !=
        std::string::npos);
  std::tie(code, what) = refusal([&] {
    kv.set(wire::KvSet{"k", Bytes(server::kMaxKvValueBytes + 1)}, {}, 8);
  });
  CHECK(code == wire::ErrorCode::too_large);
  std::tie(code, what) = refusal([&] { (void)kv.get(wire::KvGet{std::string(257, 'k')}, {}, 9); });
  CHECK(what.find("kvGet key of 257 bytes: limits are 1-256") != std::string::npos);
  std::vector<wire::Frame> payload(1);
  std::tie(code, what) = refusal([&] { kv.set(wire::KvSet{"k", bytes("v")}, payload, 10); });
  CHECK(code == wire::ErrorCode::malformed);
  CHECK(what.find("kvSet carries payload frames, expected none") != std::string::npos);
  CHECK(kv.size() == 0);
  for (size_t i = 0; i < server::kMaxKvEntries; ++i)
    kv.set(wire::KvSet{fmt::format("k{}", i), bytes("v")}, {}, 11);
  std::tie(code, what) = refusal([&] { kv.set(wire::KvSet{"one more", bytes("v")}, {}, 12); });
  CHECK(what.find("key-value store is full (4096 keys)") != std::string::npos);
  kv.set(wire::KvSet{"k0", bytes("w")}, {}, 13);  // a key it has may still change
  CHECK(kv.get(wire::KvGet{"k0"}, {}, 14) == bytes("w"));
  CHECK(kv.size() == server::kMaxKvEntries);
}
