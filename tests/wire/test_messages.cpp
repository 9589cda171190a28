#include <doctest/doctest.h>

#include "wire/messages.hpp"

using namespace geotrain;
using namespace geotrain::wire;

TEST_CASE("every message type survives encode and decode with its fields") {
  std::vector<Body> bodies = {
      Hello{"us-east", kProtocolVersion, 0x1234567890abcdefull, {"ef-downlink", "full-pull"}},
      HelloReply{"eu-west",
                 {{1, 1024, 2048, true}, {2, 3072, 100, false, 0, true, 18}},
                 17,
                 500,
                 {"kv"},
                 4,
                 true},
      Heartbeat{},
      Push{3, 9, 41, {{0, 168}, {1024, 60}}, 32768},
      PushReply{3, 9, 2, 1500, 2400},
      PullRequest{3, 40, true, 8},
      PullReply{3, 44, 9, false, {{0, 4200}}},
      Error{ErrorCode::bad_shard, "shard 9 is not owned"},
      StatsRequest{},
      StatsReply{"{\"a\":1}"},
      CheckpointRequest{},
      CheckpointReply{12},
      Shutdown{},
      Ack{},
      KvSet{"gloo/0", Bytes{std::byte{0}, std::byte{255}}},
      KvGet{"gloo/0"},
      KvReply{"gloo/0", Bytes{std::byte{7}}},
      Goodbye{},
      KvTryGet{"gloo/a/join/1"},
      HeartbeatReply{{7, 9, uint64_t{1} << 40}},
      Replica{{{4, 17, 9, true}, {5, 2, 8, false}}, 3},
      TakeBack{},
  };
  REQUIRE(bodies.size() == std::variant_size_v<Body>);
  for (const auto& body : bodies) {
    CAPTURE(body_name(body));
    auto frame = encode_header(Header{99, body});
    CHECK(frame.size() % 8 == 0);
    auto back = decode_header(frame);
    CHECK(back.request_id == 99);
    CHECK(back.version == kProtocolVersion);
    REQUIRE(back.body.index() == body.index());
  }
  const auto heartbeat_reply =
      std::get<HeartbeatReply>(decode_header(encode_header(Header{1, bodies[19]})).body);
  const auto replica = std::get<Replica>(decode_header(encode_header(Header{1, bodies[20]})).body);
  const auto push_reply =
      std::get<PushReply>(decode_header(encode_header(Header{1, bodies[4]})).body);
  CHECK(push_reply.gate_wait_us == 1500);
  CHECK(push_reply.awaited_silence_ms == 2400);
  CHECK(replica.epoch == 3);
  REQUIRE(replica.shards.size() == 2);
  CHECK(replica.shards[0].id == 4);
  CHECK(replica.shards[0].version == 17);
  CHECK(replica.shards[0].released_round == 9);
  CHECK(replica.shards[0].momentum);
  CHECK_FALSE(replica.shards[1].momentum);
  CHECK_THROWS_WITH_AS(decode_header(encode_header(Header{
                           1, Replica{std::vector<ReplicaShard>(kMaxReplicaShards + 1), 0}})),
                       doctest::Contains("replica lists 1025 shards, limit 1024"), WireError);
  // The standby's error codes keep their names.
  CHECK(std::string(error_code_name(ErrorCode::not_serving)) == "notServing");
  CHECK(std::string(error_code_name(ErrorCode::replaced)) == "replaced");
  CHECK(
      std::get<Error>(decode_header(encode_header(Header{1, Error{ErrorCode::replaced, "x"}})).body)
          .code == ErrorCode::replaced);
  CHECK(heartbeat_reply.answered == std::vector<uint64_t>{7, 9, uint64_t{1} << 40});
  // A longer list than the protocol allows is refused by name.
  CHECK_THROWS_WITH_AS(
      decode_header(
          encode_header(Header{1, HeartbeatReply{std::vector<uint64_t>(kMaxAnsweredIds + 1)}})),
      doctest::Contains("heartbeatReply lists 257 request ids, limit 256"), WireError);
  auto hello_reply = std::get<HelloReply>(decode_header(encode_header(Header{1, bodies[1]})).body);
  REQUIRE(hello_reply.shards.size() == 2);
  CHECK(hello_reply.shards[0].offset == 1024);
  CHECK(hello_reply.shards[0].count == 2048);
  CHECK(hello_reply.shards[0].zero_values);       // still zero: the leader needs no full pull
  CHECK(!hello_reply.shards[1].zero_values);      // absent (an older server) reads false: pull it
  CHECK(!hello_reply.shards[0].flushed);          // absent reads false: the region trains on
  CHECK(hello_reply.shards[1].flushed);           // this region flushed it before the hello
  CHECK(hello_reply.shards[0].next_round == 0);   // absent: the reply's next_round holds
  CHECK(hello_reply.shards[1].next_round == 18);  // one shard a round further on
  CHECK(hello_reply.fragments == 4);              // the servers' streaming layout
  CHECK(hello_reply.critical_fragment);
  // An older server's reply has no layout: 0 fragments, which the leader reads as "not said".
  auto old_reply = std::get<HelloReply>(
      decode_header(encode_header(Header{1, HelloReply{"eu-west", {}, 1, 500, {}}})).body);
  CHECK(old_reply.fragments == 0);
  auto push = std::get<Push>(decode_header(encode_header(Header{1, bodies[3]})).body);
  CHECK(push.shard == 3);
  CHECK(push.round == 9);
  CHECK(push.base_version == 41);
  CHECK(!push.skip);  // absent (an older leader) reads false: the push names the next round
  const auto skipping = std::get<Push>(
      decode_header(encode_header(Header{1, Push{3, 12, 41, {}, 0, false, true}})).body);
  CHECK(skipping.round == 12);
  CHECK(skipping.skip);
  CHECK(!push.absent);  // not said (an older leader): a push with a delta
  CHECK(!skipping.absent);
  const auto absent = std::get<Push>(
      decode_header(encode_header(Header{1, Push{3, 13, 41, {}, 0, false, false, true}})).body);
  CHECK(absent.round == 13);
  CHECK(absent.absent);
  CHECK(absent.segments.empty());
  REQUIRE(push.segments.size() == 2);
  CHECK(push.segments[1].offset == 1024);
  CHECK(push.segments[1].bytes == 60);
  CHECK(push.tokens == 32768);
  // A push without tokens (an older leader) reads as 0: unknown, merged with equal weight.
  const auto untold = decode_header(encode_header(Header{1, Push{1, 2, 3, {}}}));
  CHECK(std::get<Push>(untold.body).tokens == 0);
  auto hello = std::get<Hello>(decode_header(encode_header(Header{1, bodies[0]})).body);
  CHECK(hello.region == "us-east");
  CHECK(hello.table_hash == 0x1234567890abcdefull);
  CHECK(hello.capabilities == std::vector<std::string>{"ef-downlink", "full-pull"});
  auto err = std::get<Error>(decode_header(encode_header(Header{1, bodies[7]})).body);
  CHECK(err.code == ErrorCode::bad_shard);
  CHECK(err.message == "shard 9 is not owned");
  auto kv = std::get<KvSet>(decode_header(encode_header(Header{1, bodies[14]})).body);
  CHECK(kv.value == Bytes{std::byte{0}, std::byte{255}});
}

TEST_CASE("a header that is truncated, garbage or of another version is refused with its code") {
  auto good = encode_header(Header{5, Push{1, 2, 3, {{0, 80}}}});
  auto code_of = [](const wire::Frame& m) {
    try {
      decode_header(m);
    } catch (const WireError& e) {
      return e.code();
    }
    return ErrorCode::internal;  // not refused
  };
  CHECK(code_of(wire::Frame()) == ErrorCode::malformed);
  CHECK(code_of(wire::Frame(good.data(), good.size() - 8)) == ErrorCode::malformed);
  CHECK(code_of(wire::Frame(good.data(), good.size() - 3)) == ErrorCode::malformed);
  std::vector<uint8_t> junk(48, 0xab);
  CHECK(code_of(wire::Frame(junk.data(), junk.size())) == ErrorCode::malformed);
  Header other{6, Heartbeat{}};
  other.version = kProtocolVersion + 1;
  auto frame = encode_header(other);
  CHECK(code_of(frame) == ErrorCode::bad_version);
  try {
    decode_header(frame);
  } catch (const WireError& e) {
    CHECK(e.request_id() == 6);
    CHECK(std::string(e.what()).find(fmt::format("version {}", kProtocolVersion + 1)) !=
          std::string::npos);
    CHECK(std::string(e.what()).find(fmt::format("speaks {}", kProtocolVersion)) !=
          std::string::npos);
  }
  std::vector<uint8_t> huge((kMaxHeaderWords + 1) * 8, 0);
  CHECK(code_of(wire::Frame(huge.data(), huge.size())) == ErrorCode::too_large);
}

TEST_CASE(
    "a peer of protocol 1 (codec and count in each segment) is refused, naming both versions") {
  static_assert(kProtocolVersion == 2);
  Header old{9, Push{1, 2, 3, {{0, 80}}}};
  old.version = 1;
  const auto frame = encode_header(old);
  CHECK_THROWS_WITH_AS(
      decode_header(frame),
      doctest::Contains("protocol version 1 is not supported, this build speaks 2"), WireError);
}

TEST_CASE("payload frames must match the header's segments in number and size") {
  std::vector<wire::Frame> frames;
  frames.emplace_back(size_t{80});
  frames.emplace_back(size_t{16});
  std::vector<Segment> segments{{0, 80}, {10, 16}};
  CHECK_NOTHROW(check_frames(segments, frames, 1));
  segments[1].bytes = 17;
  CHECK_THROWS_WITH_AS(check_frames(segments, frames, 1), doctest::Contains("segment 1"),
                       WireError);
  segments.pop_back();
  CHECK_THROWS_WITH_AS(check_frames(segments, frames, 1), doctest::Contains("1 segments but 2"),
                       WireError);
}

TEST_CASE("a frame built from bytes owns them without copying") {
  Bytes b(1000, std::byte{3});
  const void* data = b.data();
  auto frame = frame_from_bytes(std::move(b));
  CHECK(frame.data() == data);
  CHECK(frame.size() == 1000);
}
