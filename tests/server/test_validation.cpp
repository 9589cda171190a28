#include <doctest/doctest.h>

#include "server_fixture.hpp"

using namespace geotrain;
using namespace geotrain::test;

namespace {

struct BadCase {
  const char* name;
  wire::ErrorCode code;
  std::function<std::vector<wire::Frame>(uint64_t hash)> frames;
};

std::vector<wire::Frame> message(wire::Header h, std::vector<Bytes> payloads = {}) {
  std::vector<wire::Frame> f;
  f.push_back(wire::encode_header(h));
  for (auto& p : payloads) f.push_back(wire::frame_from_bytes(std::move(p)));
  return f;
}

std::vector<wire::Frame> push_with(wire::Push p, Bytes payload) {
  std::vector<Bytes> payloads;
  payloads.push_back(std::move(payload));
  return message(wire::Header{77, p}, std::move(payloads));
}

Bytes good_payload() { return encode(filled(kShard, 1.0f)); }

}  // namespace

TEST_CASE("every malformed message gets an error reply naming the problem and changes no state") {
  const std::vector<BadCase> cases = {
      {"truncated header", wire::ErrorCode::malformed,
       [](uint64_t) {
         auto full = wire::encode_header(wire::Header{77, wire::Heartbeat{}});
         std::vector<wire::Frame> f;
         f.emplace_back(full.data(), full.size() - 8);
         return f;
       }},
      {"header not a multiple of 8 bytes", wire::ErrorCode::malformed,
       [](uint64_t) {
         std::vector<wire::Frame> f;
         f.emplace_back("hello", 5);
         return f;
       }},
      {"garbage header", wire::ErrorCode::malformed,
       [](uint64_t) {
         std::vector<wire::Frame> f;
         std::vector<uint8_t> junk(64, 0xff);
         f.emplace_back(junk.data(), junk.size());
         return f;
       }},
      {"wrong protocol version", wire::ErrorCode::bad_version,
       [](uint64_t) {
         wire::Header h{77, wire::Heartbeat{}};
         h.version = wire::kProtocolVersion + 1;
         return message(h);
       }},
      {"hello with a wrong table hash", wire::ErrorCode::bad_table_hash,
       [](uint64_t hash) {
         return message(wire::Header{77, wire::Hello{"b", wire::kProtocolVersion, hash + 1, {}}});
       }},
      {"hello from an unknown region", wire::ErrorCode::unknown_region,
       [](uint64_t hash) {
         return message(wire::Header{77, wire::Hello{"zz", wire::kProtocolVersion, hash, {}}});
       }},
      {"hello with a wrong protocol version field", wire::ErrorCode::bad_version,
       [](uint64_t hash) {
         return message(wire::Header{77, wire::Hello{"b", 99, hash, {}}});
       }},
      {"unknown shard", wire::ErrorCode::bad_shard,
       [](uint64_t) {
         auto p = good_payload();
         auto h = push_header(9, 1, 0, p);
         return push_with(h, std::move(p));
       }},
      {"segment range past the shard", wire::ErrorCode::bad_range,
       [](uint64_t) {
         auto p = good_payload();
         auto h = push_header(0, 1, 0, p);
         h.segments[0].offset = 1;
         return push_with(h, std::move(p));
       }},
      {"segment byte size differs from the frame", wire::ErrorCode::malformed,
       [](uint64_t) {
         auto p = good_payload();
         auto h = push_header(0, 1, 0, p);
         h.segments[0].bytes += 4;
         return push_with(h, std::move(p));
       }},
      {"fewer frames than segments", wire::ErrorCode::malformed,
       [](uint64_t) {
         auto p = good_payload();
         return message(wire::Header{77, push_header(0, 1, 0, p)});
       }},
      {"a payload claiming more elements than the shard", wire::ErrorCode::bad_range,
       [](uint64_t) {
         auto p = encode(filled(kShard + 1, 1.0f));
         auto h = push_header(0, 1, 0, p);
         return push_with(h, std::move(p));
       }},
      {"an element count in a checksummed fp32 header that its body does not hold",
       wire::ErrorCode::bad_payload,
       [](uint64_t) {
         // The right size for the shard, a sound checksum, and a header that claims fewer elements.
         auto p = good_payload();
         auto h = compression::parse_header(p);
         h.elements = kShard - 1;
         compression::write_header(h, p);
         auto header = push_header(0, 1, 0, p);
         return push_with(header, std::move(p));
       }},
      {"payload with a flipped bit in its last checksum block", wire::ErrorCode::bad_payload,
       [](uint64_t) {
         auto p = good_payload();
         p[p.size() - 3] ^= std::byte{4};
         auto h = push_header(0, 1, 0, p);
         return push_with(h, std::move(p));
       }},
      {"unknown codec id in the payload's header", wire::ErrorCode::bad_codec,
       [](uint64_t) {
         auto p = good_payload();
         auto h = compression::parse_header(p);
         h.codec = static_cast<compression::CodecId>(42);
         compression::write_header(h, p);  // a sound checksum: only the codec is wrong
         auto header = push_header(0, 1, 0, p);
         return push_with(header, std::move(p));
       }},
      {"payload with a flipped bit", wire::ErrorCode::bad_payload,
       [](uint64_t) {
         auto p = good_payload();
         p[100] ^= std::byte{1};
         auto h = push_header(0, 1, 0, p);
         return push_with(h, std::move(p));
       }},
      {"round out of order", wire::ErrorCode::bad_round,
       [](uint64_t) {
         auto p = good_payload();
         auto h = push_header(0, 3, 0, p);
         return push_with(h, std::move(p));
       }},
      {"base version from the future", wire::ErrorCode::bad_round,
       [](uint64_t) {
         auto p = good_payload();
         auto h = push_header(0, 1, 1000, p);
         return push_with(h, std::move(p));
       }},
      {"non-finite delta", wire::ErrorCode::bad_payload,
       [](uint64_t) {
         auto v = filled(kShard, 1.0f);
         v[7] = std::numeric_limits<float>::quiet_NaN();
         auto p = encode(v);
         auto h = push_header(0, 1, 0, p);
         return push_with(h, std::move(p));
       }},
      {"pull of changes before a full pull", wire::ErrorCode::bad_round,
       [](uint64_t) {
         return message(wire::Header{77, wire::PullRequest{0, 0, false, 0}});
       }},
      {"pull waiting for a round never pushed", wire::ErrorCode::bad_round,
       [](uint64_t) {
         return message(wire::Header{77, wire::PullRequest{0, 0, true, 5}});
       }},
      {"a reply sent as a request", wire::ErrorCode::malformed,
       [](uint64_t) {
         return message(wire::Header{77, wire::Ack{}});
       }},
  };

  TempDir tmp("malformed");
  const auto& dir = tmp.path();
  Cluster cluster(small_config(dir, 1));
  auto a = cluster.client(), b = cluster.client();
  hello(a, "a", cluster.table_hash());
  push(a, 1, filled(kShard, 2.0f));  // some state to preserve
  // After the values changed: b's downlink does not start from zero, so it must pull in full
  // before it may pull changes.
  hello(b, "b", cluster.table_hash());
  const auto values_before = pull(a, true).values;
  auto before = stats(a);
  for (const auto& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    REQUIRE(b.send_raw(c.frames(cluster.table_hash())));
    auto r = b.receive(20s);
    REQUIRE(r);
    REQUIRE(std::holds_alternative<wire::Error>(r->header.body));
    const auto& e = std::get<wire::Error>(r->header.body);
    CHECK_MESSAGE(e.code == c.code, "got ", wire::error_code_name(e.code), ": ", e.message);
    CHECK(!e.message.empty());
    auto now = stats(a);
    CHECK(now["shards"] == before["shards"]);
    CHECK(now["parked"] == 0);
    CHECK(now["regions"]["b"]["live"] == true);
    CHECK(now["regions"]["b"]["pushes"] == 0);
  }
  CHECK(pull(a, true).values == values_before);
  // b is still registered and its correct push goes through afterwards
  CHECK(push(b, 1, filled(kShard, 0.0f)).round == 1);
}
