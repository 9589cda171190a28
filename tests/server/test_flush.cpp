// The end of a run at the server (docs/protocol.md, "The flush"): a shard keeps each region's
// flush until every live region has flushed, then applies the outer lr times their mean, once,
// without the momentum; a final pull waits for that. Closed forms on tiny shards, and the wire
// checks on a real server.
#include <doctest/doctest.h>

#include "server/shard.hpp"
#include "tests/server/server_fixture.hpp"

using namespace geotrain;
using namespace geotrain::test;

namespace {
server::Shard tiny_shard(size_t regions, server::OuterOptimizerConfig optimizer = {},
                         uint8_t critical = 0) {
  server::ShardSettings settings;
  settings.optimizer = optimizer;
  return server::Shard(server::ShardRange{0, 0, 4, 0, 0}, std::vector<uint8_t>(4, critical),
                       regions, settings);
}

std::vector<float> copy(ConstFloatSpan x) { return {x.begin(), x.end()}; }
}  // namespace

TEST_CASE("a shard's flush waits for every live region, then adds lr times their mean once") {
  for (uint8_t critical : {uint8_t{0}, uint8_t{1}}) {
    CAPTURE(int(critical));
    auto shard = tiny_shard(3, {0.5f, 0.9f, false}, critical);
    const std::vector<bool> live{true, true, true};
    // A round with momentum first, so that there is momentum to leave alone.
    for (size_t r = 0; r < 3; ++r) shard.apply_push(r, 1, std::vector<float>{1, 2, 3, 4}, live);
    shard.release_ready(live);
    REQUIRE(shard.released_round() == 1);
    const auto values = copy(shard.values()), momentum = copy(shard.momentum());
    const auto version = shard.version();
    CHECK(shard.add_flush(0, std::vector<float>{3, 0, -3, 6}, 0));
    CHECK(shard.add_flush(1, {}, 0));  // owes nothing: zeros in the mean
    CHECK(shard.release_flush(live) == 0);
    CHECK_FALSE(shard.flush_released());
    CHECK(shard.values()[0] == values[0]);
    CHECK(shard.add_flush(2, std::vector<float>{0, 6, 0, 0}, 0));
    CHECK(shard.release_flush(live) == 3);
    CHECK(shard.flush_released());
    CHECK(shard.version() == version + 1);
    // lr 0.5 times the mean over the three regions.
    const std::vector<float> mean{1, 2, -1, 2};
    for (size_t i = 0; i < 4; ++i)
      CHECK(shard.values()[i] == doctest::Approx(values[i] + 0.5f * mean[i]));
    for (size_t i = 0; i < 4; ++i) CHECK(shard.momentum()[i] == momentum[i]);
    CHECK(shard.release_flush(live) == 0);  // once
  }
}

TEST_CASE("with a lossy downlink the flush lands on the mean of what the regions hold") {
  server::ShardSettings settings;
  settings.downlink_codec = "onebit";
  server::Shard shard(server::ShardRange{0, 0, 4, 0, 0}, std::vector<uint8_t>(4, 1), 2, settings);
  const std::vector<bool> live{true, true};
  for (size_t r = 0; r < 2; ++r) shard.pull_values(r);  // both start from the zeros
  for (size_t r = 0; r < 2; ++r) shard.apply_push(r, 1, std::vector<float>{1, 2, 3, 4}, live);
  shard.release_ready(live);
  REQUIRE(shard.values()[3] == 4.0f);
  // onebit of (1, 2, 3, 4): every element +2.5 (the mean |x|); the residual keeps the rest.
  Bytes out;
  for (size_t r = 0; r < 2; ++r) shard.pull_change(r, out);
  CHECK(shard.downlink_residual(0)[0] == -1.5f);
  CHECK(shard.downlink_residual(1)[3] == 1.5f);
  // Region 0 owes one more unit on element 0; region 1 nothing. Both hold 2.5 everywhere.
  const auto version = shard.version();
  CHECK(shard.add_flush(0, std::vector<float>{1, 0, 0, 0}, 0));
  CHECK(shard.add_flush(1, {}, 0));
  CHECK(shard.release_flush(live) == 2);
  CHECK(shard.version() == version + 1);
  const std::vector<float> want{3.0f, 2.5f, 2.5f, 2.5f};  // 2.5 + the mean of (1, 0) on element 0
  for (size_t i = 0; i < 4; ++i) CHECK(shard.values()[i] == doctest::Approx(want[i]));
}

TEST_CASE(
    "with an fp32 downlink a region holds the values of its flush, whatever is released after") {
  // Region 1 flushes at round 1's values; region 0, one push ahead on the shard (it merged a
  // deferred push a round earlier), has its round 2 released alone once region 1 no longer
  // counts, pulls it and flushes. The final model is the mean of what each held plus its
  // progress: round 2 moved region 0's copy only.
  auto shard = tiny_shard(2, {1.0f, 0.0f, false}, 1);
  const std::vector<bool> both{true, true}, only_0{true, false};
  for (size_t r = 0; r < 2; ++r) shard.apply_push(r, 1, std::vector<float>{2, 2, 2, 2}, both);
  shard.release_ready(both);
  REQUIRE(shard.values()[0] == 2.0f);
  shard.apply_push(0, 2, std::vector<float>{4, 0, 0, 0}, both);
  CHECK(shard.add_flush(1, std::vector<float>{0, 1, 0, 0}, 0));  // holds 2 everywhere
  shard.release_ready(only_0);  // region 1 flushed: round 2 is region 0's alone
  REQUIRE(shard.released_round() == 2);
  REQUIRE(shard.values()[0] == 6.0f);
  CHECK(shard.add_flush(0, std::vector<float>{0, 0, 2, 0}, 0));  // holds 6, 2, 2, 2
  CHECK(shard.release_flush(both) == 2);
  // mean(6, 2) + mean(0, 0); mean(2, 2) + mean(0, 1); mean(2, 2) + mean(2, 0); 2.
  const std::vector<float> want{4.0f, 2.5f, 3.0f, 2.0f};
  for (size_t i = 0; i < 4; ++i) CHECK(shard.values()[i] == doctest::Approx(want[i]));
}

TEST_CASE("a flush that owes nothing anywhere makes no version; a dead region is not waited for") {
  auto shard = tiny_shard(3);
  const std::vector<bool> live{true, true, false};
  CHECK(shard.add_flush(1, {}, 0));
  CHECK(shard.release_flush(live) == 0);
  CHECK(shard.add_flush(0, {}, 0));
  CHECK(shard.release_flush(live) == 2);
  CHECK(shard.version() == 0);
  // The dead region comes back and flushes: too late, dropped; the values stay what the others
  // pulled.
  CHECK_FALSE(shard.add_flush(2, std::vector<float>{1, 1, 1, 1}, 0));
  CHECK(shard.flushed(2));
  CHECK(shard.version() == 0);
  CHECK(shard.values()[0] == 0.0f);
}

TEST_CASE("a final pull waits for every live region's flush; a second flush is refused") {
  TempDir dir("flush-wire");
  Cluster cluster(small_config(dir.path(), 0, kOnlyRegistered));
  auto a = cluster.client(), b = cluster.client();
  hello(a, "a", cluster.table_hash());
  hello(b, "b", cluster.table_hash());
  // a owes 2 on every element, b nothing.
  auto flush = push_header(0, 1, 0, encode(filled(kShard, 2.0f)));
  flush.flush = true;
  as<wire::PushReply>(expect_reply(a, flush, frames(encode(filled(kShard, 2.0f)))));
  // Flushed once only.
  auto again = expect_reply(a, flush, frames(encode(filled(kShard, 2.0f))));
  REQUIRE(std::holds_alternative<wire::Error>(again.header.body));
  CHECK(std::get<wire::Error>(again.header.body).code == wire::ErrorCode::bad_round);
  // b has not flushed: its final pull would wait for itself.
  auto early = expect_reply(b, wire::PullRequest{0, 0, true, 0, true});
  REQUIRE(std::holds_alternative<wire::Error>(early.header.body));
  CHECK(std::get<wire::Error>(early.header.body).message.find("has not flushed") !=
        std::string::npos);
  // a's final pull waits for b's flush.
  const auto id = a.send(wire::PullRequest{0, 0, true, 0, true});
  REQUIRE(id.has_value());
  CHECK_FALSE(a.receive(300ms).has_value());
  as<wire::PushReply>(expect_reply(b, wire::Push{0, 1, 0, {}, 0, true}));
  auto reply = a.receive(20s);
  REQUIRE(reply.has_value());
  CHECK(reply->header.request_id == *id);
  const auto& pr = as<wire::PullReply>(*reply);
  CHECK(pr.full);
  std::vector<float> values(kShard);
  compression::decode_payload(wire::frame_bytes(reply->payloads.at(0)), values);
  CHECK(values[0] == 1.0f);  // the mean of 2 and 0, at lr 1
  CHECK(values[kShard - 1] == 1.0f);
}
