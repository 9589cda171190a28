// The quorum consistency policy (server/consistency.hpp, docs/protocol.md "Consistency"): rounds
// released by a quorum once the grace window expires, token-weighted merges, late deltas folded
// into the next merge, and dead regions that hold nothing back.
#include <doctest/doctest.h>

#include <array>
#include <fstream>

#include "server/shard.hpp"
#include "server_fixture.hpp"

using namespace geotrain;
using namespace geotrain::test;

namespace {

using Ms = std::chrono::milliseconds;
const server::Shard::TimePoint T0{};

server::ShardSettings quorum_settings(uint32_t quorum, Ms grace, server::MergeWeighting weighting) {
  server::ShardSettings s;
  s.consistency.policy = server::ConsistencyPolicy::quorum;
  s.consistency.quorum = quorum;
  s.consistency.grace = grace;
  s.consistency.weighting = weighting;
  return s;
}

// A shard of 8 critical elements shared by 3 regions.
server::Shard critical_shard(const server::ShardSettings& settings) {
  return server::Shard({0, 0, 8, 0}, std::vector<uint8_t>(8, 1), 3, settings);
}

const std::vector<bool> kAllLive{true, true, true};

wire::PushReply push_tokens(wire::Client& c, uint64_t round, const std::vector<float>& delta,
                            uint64_t tokens) {
  auto payload = encode(delta);
  auto h = push_header(0, round, 0, payload);
  h.tokens = tokens;
  auto r = expect_reply(c, h, frames(std::move(payload)));
  return as<wire::PushReply>(r);
}

// Waits for the reply to request `id` (replies to other requests of this client are skipped).
wire::Reply reply_to(wire::Client& c, uint64_t id) {
  for (;;) {
    auto r = c.receive(20s);
    REQUIRE_MESSAGE(r.has_value(), "no reply within 20 s");
    if (r->header.request_id == id) return std::move(*r);
  }
}

std::vector<float> values_of(const wire::Reply& r) {
  std::vector<float> v(kShard);
  compression::decode_payload(wire::frame_bytes(r.payloads.at(0)), v);
  return v;
}

std::vector<nlohmann::json> round_events(const std::filesystem::path& run_dir) {
  std::ifstream in(run_dir / "server-a.metrics.jsonl");
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] == "round") out.push_back(j);
  }
  return out;
}

}  // namespace

TEST_CASE("a quorum round is released when its grace window expires, not before") {
  auto shard = critical_shard(quorum_settings(2, Ms(500), server::MergeWeighting::equal));
  shard.apply_push(0, 1, filled(8, 2.0f), kAllLive, {0, T0});
  CHECK_FALSE(shard.grace_deadline());  // one push is no quorum: nothing to wake up for
  shard.apply_push(1, 1, filled(8, 4.0f), kAllLive, {0, T0 + Ms(100)});
  REQUIRE(shard.grace_deadline());
  CHECK(*shard.grace_deadline() == T0 + Ms(500));  // measured from the round's first push
  CHECK(shard.release_ready(kAllLive, T0 + Ms(499)).empty());
  const auto released = shard.release_ready(kAllLive, T0 + Ms(500));
  REQUIRE(released.size() == 1);
  CHECK(released[0].round == 1);
  CHECK(released[0].contributors == 2);
  CHECK(released[0].late == 0);
  CHECK(shard.values()[0] == 3.0f);  // (2 + 4) / 2
  CHECK_FALSE(shard.grace_deadline());
}

TEST_CASE("equal and token weighting give the hand-computed averages") {
  // Deltas 2, 4, 10 from regions a, b, c, each round complete (no grace involved).
  auto merged = [](server::ConsistencyPolicy policy, server::MergeWeighting weighting,
                   std::array<uint64_t, 3> tokens) {
    server::ShardSettings s;
    s.consistency.policy = policy;
    s.consistency.quorum = 2;
    s.consistency.weighting = weighting;
    auto shard = critical_shard(s);
    const std::array<float, 3> delta{2.0f, 4.0f, 10.0f};
    for (size_t r = 0; r < 3; ++r)
      shard.apply_push(r, 1, filled(8, delta[r]), kAllLive, {tokens[r], T0});
    REQUIRE(shard.release_ready(kAllLive, T0).size() == 1);
    return shard.values()[7];
  };
  using P = server::ConsistencyPolicy;
  using W = server::MergeWeighting;
  // tokens 1, 1, 2: (1*2 + 1*4 + 2*10) / 4 = 6.5; equal: (2 + 4 + 10) / 3.
  CHECK(merged(P::quorum, W::tokens, {1, 1, 2}) == 6.5f);
  CHECK(merged(P::quorum, W::equal, {1, 1, 2}) == 16.0f / 3.0f);
  // The weighting applies to ssp's synchronous rounds as well.
  CHECK(merged(P::ssp, W::tokens, {1, 1, 2}) == 6.5f);
  // A delta of unknown tokens (0) makes the merge equal; so do tokens all alike.
  CHECK(merged(P::quorum, W::tokens, {1, 0, 2}) == 16.0f / 3.0f);
  CHECK(merged(P::quorum, W::tokens, {5, 5, 5}) == 16.0f / 3.0f);
  // ssp by default ignores the tokens: today's plain average.
  CHECK(merged(P::ssp, server::ShardSettings{}.consistency.weighting, {1, 1, 2}) == 16.0f / 3.0f);
}

TEST_CASE(
    "a region lagging rounds behind holds nobody back, and each late delta joins the next merge") {
  // Bound 0: under ssp, a and b could not push round 2 before c pushed round 1.
  auto shard = critical_shard(quorum_settings(2, Ms(0), server::MergeWeighting::equal));
  for (uint64_t t = 1; t <= 3; ++t) {
    CHECK(shard.admits(t, kAllLive));
    CHECK(shard.gate().admits(t, kAllLive) == (t == 1));  // the ssp rule would have parked it
    shard.apply_push(0, t, filled(8, 1.0f), kAllLive, {0, T0});
    shard.apply_push(1, t, filled(8, 3.0f), kAllLive, {0, T0});
    REQUIRE(shard.release_ready(kAllLive, T0).size() == 1);  // quorum 2, grace 0
  }
  CHECK(shard.values()[0] == 6.0f);  // three rounds of (1 + 3) / 2
  // c pushes rounds 1 and 2, both released without it: late, admitted, waiting for round 4.
  CHECK(shard.apply_push(2, 1, filled(8, 10.0f), kAllLive, {0, T0}).late);
  CHECK(shard.apply_push(2, 2, filled(8, 20.0f), kAllLive, {0, T0}).late);
  CHECK(shard.gate().clock(2) == 2);
  CHECK(shard.values()[0] == 6.0f);
  CHECK(shard.release_ready(kAllLive, T0).empty());  // late deltas are no quorum
  shard.apply_push(0, 4, filled(8, 1.0f), kAllLive, {0, T0});
  shard.apply_push(1, 4, filled(8, 3.0f), kAllLive, {0, T0});
  const auto released = shard.release_ready(kAllLive, T0);
  REQUIRE(released.size() == 1);
  CHECK(released[0].round == 4);
  CHECK(released[0].contributors == 4);
  CHECK(released[0].late == 2);
  CHECK(shard.values()[0] == 6.0f + (1.0f + 3.0f + 10.0f + 20.0f) / 4.0f);
  // c catches up: rounds 3 and 4 are late, round 5 is on time, and completes round 5 at once.
  CHECK(shard.apply_push(2, 3, filled(8, 0.0f), kAllLive, {0, T0}).late);
  CHECK(shard.apply_push(2, 4, filled(8, 0.0f), kAllLive, {0, T0}).late);
  CHECK_FALSE(shard.apply_push(2, 5, filled(8, 0.0f), kAllLive, {0, T0}).late);
  shard.apply_push(0, 5, filled(8, 1.0f), kAllLive, {0, T0 + Ms(1)});
  shard.apply_push(1, 5, filled(8, 3.0f), kAllLive, {0, T0 + Ms(1)});
  const auto complete = shard.release_ready(kAllLive, T0 + Ms(1));
  REQUIRE(complete.size() == 1);
  CHECK(complete[0].contributors == 5);
  CHECK(complete[0].late == 2);
}

TEST_CASE(
    "quorum over the wire: a slow region's round is released after the grace window with the "
    "others' token-weighted average, and its late delta lands in the next round") {
  TempDir tmp("quorum-slow");
  Cluster cluster(
      small_config(tmp.path(), 0, "  consistency: {policy: quorum, quorum: 2, grace_ms: 500}"));
  auto a = cluster.client(), b = cluster.client(), c = cluster.client();
  hello(a, "a", cluster.table_hash());
  hello(b, "b", cluster.table_hash());
  hello(c, "c", cluster.table_hash());

  // Round 1: a (4, 1 token) at 0 ms and b (8, 3 tokens) at 100 ms; c is slow.
  push_tokens(a, 1, filled(kShard, 4.0f), 1);
  cluster.clock().set(100);
  push_tokens(b, 1, filled(kShard, 8.0f), 3);
  const auto waiting = a.send(wire::PullRequest{0, 0, true, 1});
  REQUIRE(waiting);
  cluster.clock().set(499);
  CHECK(stats(b)["shards"][0]["released_round"] == 0);  // the grace window is still open
  cluster.clock().set(500);  // 500 ms after the round's first push: released without c
  const auto r1 = reply_to(a, *waiting);
  CHECK(as<wire::PullReply>(r1).round == 1);
  const auto v1 = values_of(r1);
  CHECK(v1[0] == 7.0f);                       // critical: (1*4 + 3*8) / (1 + 3)
  CHECK(v1[kCrit] == doctest::Approx(4.0f));  // non-critical on arrival: 4/3 + 8/3 (c counts)

  // The slow region holds nobody back: a pushes round 2 though c has not pushed round 1 (bound 0).
  push_tokens(a, 2, filled(kShard, 4.0f), 1);
  // c's round 1 arrives late (16, 2 tokens): accepted, and its pull is answered at once, with the
  // values as released (its delta is not in them yet).
  cluster.clock().set(600);
  CHECK(push_tokens(c, 1, filled(kShard, 16.0f), 2).staleness == 1);  // a is one round ahead
  const auto c_view = pull(c, true, 0, 1);
  CHECK(c_view.header.round == 1);
  CHECK(c_view.values[0] == 7.0f);
  // Round 2: b (8, 3 tokens) and c on time (0, 2 tokens): every live region has pushed, so it is
  // released at once, with c's late round-1 delta folded in.
  push_tokens(b, 2, filled(kShard, 8.0f), 3);
  push_tokens(c, 2, filled(kShard, 0.0f), 2);
  const auto v2 = pull(a, true, 0, 2);
  CHECK(v2.header.round == 2);
  // (1*4 + 3*8 + 2*16 + 2*0) / (1 + 3 + 2 + 2) = 60 / 8
  CHECK(v2.values[0] == 7.0f + 7.5f);
  CHECK(v2.values[kCrit] == doctest::Approx(40.0f / 3.0f));  // (4 + 8 + 4 + 16 + 8 + 0) / 3

  cluster.stop();
  const auto rounds = round_events(tmp.path());
  REQUIRE(rounds.size() == 2);
  CHECK(rounds[0]["contributors"] == 2);
  CHECK_FALSE(rounds[0].contains("late"));
  CHECK(rounds[1]["contributors"] == 4);
  CHECK(rounds[1]["late"] == 1);
}

TEST_CASE(
    "quorum over the wire: once membership declares a silent region dead, rounds keep "
    "releasing without waiting for the grace window") {
  TempDir tmp("quorum-dead");
  // A grace window longer than the test: only the all-live rule can release a round here.
  Cluster cluster(small_config(
      tmp.path(), 0, "  consistency: {policy: quorum, grace_ms: 60000, weighting: equal}"));
  auto a = cluster.client(), b = cluster.client(), c = cluster.client();
  hello(a, "a", cluster.table_hash());
  hello(b, "b", cluster.table_hash());
  hello(c, "c", cluster.table_hash());  // ... and never says anything again
  push(a, 1, filled(kShard, 1.0f));
  push(b, 1, filled(kShard, 3.0f));
  const auto waiting = a.send(wire::PullRequest{0, 0, true, 1});
  REQUIRE(waiting);
  cluster.clock().set(600);
  as<wire::HeartbeatReply>(expect_reply(a, wire::Heartbeat{}));
  as<wire::HeartbeatReply>(expect_reply(b, wire::Heartbeat{}));
  CHECK(stats(a)["shards"][0]["released_round"] == 0);  // c is live, quorum 2 waits for grace
  cluster.clock().set(1200);                            // c silent for 1200 ms > dead_after
  const auto r1 = reply_to(a, *waiting);
  CHECK(as<wire::PullReply>(r1).round == 1);
  CHECK(values_of(r1)[0] == 2.0f);  // (1 + 3) / 2
  CHECK(stats(a)["regions"]["c"]["live"] == false);
  // Later rounds need only a and b.
  for (uint64_t t = 2; t <= 3; ++t) {
    push(a, t, filled(kShard, 1.0f));
    push(b, t, filled(kShard, 3.0f));
    CHECK(stats(a)["shards"][0]["released_round"] == t);
  }
  CHECK(pull(a, true, 0, 3).values[0] == 6.0f);
  // The dead region is refused until it says hello again, and then resumes at the next round.
  auto refused = expect_reply(c, wire::Heartbeat{});
  REQUIRE(std::holds_alternative<wire::Error>(refused.header.body));
  CHECK(std::get<wire::Error>(refused.header.body).code == wire::ErrorCode::unregistered);
  CHECK(hello(c, "c", cluster.table_hash()).next_round == 4);
}

TEST_CASE("a push claiming more than 2^40 tokens is refused and changes nothing") {
  TempDir tmp("quorum-tokens");
  Cluster cluster(small_config(tmp.path(), 0, "  consistency: {policy: quorum}"));
  auto a = cluster.client();
  hello(a, "a", cluster.table_hash());
  auto payload = encode(filled(kShard, 1.0f));
  auto h = push_header(0, 1, 0, payload);
  h.tokens = server::kMaxPushTokens + 1;
  auto r = expect_reply(a, h, frames(std::move(payload)));
  REQUIRE(std::holds_alternative<wire::Error>(r.header.body));
  CHECK(std::get<wire::Error>(r.header.body).code == wire::ErrorCode::bad_payload);
  CHECK(std::get<wire::Error>(r.header.body).message.find("push.tokens") != std::string::npos);
  CHECK(stats(a)["shards"][0]["clocks"][0] == 0);
  CHECK(push_tokens(a, 1, filled(kShard, 1.0f), server::kMaxPushTokens).round == 1);
}
