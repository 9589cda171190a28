// A leader's shard (worker/leader/shard.hpp): each path of the exchange through its transitions,
// and the shard as a task: its replies taken by request id and applied to its slice of base, its
// rounds mapped onto its server's. (A transition from a phase that does not allow it is a
// GT_ASSERT: it aborts, so it is not tested here.)
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <vector>

#include "compression/codecs.hpp"
#include "wire/client.hpp"
#include "worker/leader/shard.hpp"
#include "worker/leader/tensor_motion.hpp"
#include "worker/leader/uplink.hpp"

using namespace geotrain;
using namespace geotrain::worker;

TEST_CASE("a pipelined push and pull: idle -> pushing -> pulling -> idle") {
  LeaderShard sh;
  sh.push(7, 1);
  sh.pull(8);  // right behind the push
  CHECK(sh.phase() == ShardPhase::pushing);
  CHECK(sh.exchanging());
  sh.push_answered();
  CHECK(sh.phase() == ShardPhase::pulling);
  sh.pulled(42);
  CHECK(sh.phase() == ShardPhase::idle);
  CHECK(sh.version == 42);
  CHECK_FALSE(sh.push_id());
  CHECK_FALSE(sh.pull_id());
}

TEST_CASE("a pull sent after the push's answer: pushing -> pushed -> pulling -> idle") {
  LeaderShard sh;
  sh.push(1, 1);
  sh.push_answered();
  CHECK(sh.phase() == ShardPhase::pushed);
  sh.pull(2);
  CHECK(sh.phase() == ShardPhase::pulling);
  sh.pulled(3);
  CHECK(sh.phase() == ShardPhase::idle);
}

TEST_CASE("a pull answered before its push stays pushing; the push's answer ends the exchange") {
  LeaderShard sh;
  sh.push(1, 1);
  sh.pull(2);
  sh.pulled(5);
  CHECK(sh.phase() == ShardPhase::pushing);
  CHECK(sh.push_id() == 1u);
  CHECK_FALSE(sh.pull_id());
  sh.push_answered();
  CHECK(sh.phase() == ShardPhase::idle);  // no second pull
  SUBCASE("deferred meanwhile: merged by the push's answer") {
    LeaderShard late;
    late.push(1, 1);
    late.pull(2);
    late.defer(3);
    late.pulled(5);
    CHECK(late.phase() == ShardPhase::deferred);
    late.push_answered();
    CHECK(late.phase() == ShardPhase::merged);
  }
}

TEST_CASE("deferred: in flight past the exchange, merged when the pull comes, handed back") {
  LeaderShard sh;
  sh.push(10, 1);
  sh.defer(4);
  CHECK(sh.phase() == ShardPhase::deferred);
  CHECK(sh.deferred());
  CHECK(sh.in_flight());
  CHECK(sh.deferred_round() == 4u);
  sh.push_answered();  // the push's answer comes later
  CHECK(sh.phase() == ShardPhase::deferred);
  sh.pull(11);  // its pull goes then
  CHECK(sh.in_flight());
  sh.pulled(9);
  CHECK(sh.phase() == ShardPhase::merged);
  CHECK(sh.deferred());
  CHECK_FALSE(sh.in_flight());
  sh.hand_back(0, 0);
  CHECK(sh.phase() == ShardPhase::idle);
  CHECK_FALSE(sh.deferred());
}

TEST_CASE("a lost server: needs a full pull; a deferred shard stays deferred until it") {
  SUBCASE("in step") {
    LeaderShard sh;
    sh.push(1, 1);
    sh.lost();
    CHECK(sh.phase() == ShardPhase::needs_resync);
    CHECK(sh.needs_full_pull());
    CHECK_FALSE(sh.push_id());
    sh.resynced(6);
    CHECK(sh.phase() == ShardPhase::idle);
    CHECK(sh.version == 6);
  }
  SUBCASE("deferred") {
    LeaderShard sh;
    sh.push(1, 1);
    sh.pull(2);
    sh.defer(3);
    sh.lost();
    CHECK(sh.phase() == ShardPhase::deferred_lost);
    CHECK(sh.deferred());
    CHECK_FALSE(sh.in_flight());
    CHECK_FALSE(sh.pull_id());
    sh.resynced(8);
    CHECK(sh.phase() == ShardPhase::merged);
    sh.hand_back(0, 0);
    CHECK(sh.phase() == ShardPhase::idle);
  }
  SUBCASE("merged, then lost: handed back with a full pull due") {
    LeaderShard sh;
    sh.push(1, 1);
    sh.defer(3);
    sh.push_answered();
    sh.pull(2);
    sh.pulled(4);
    sh.lost();
    CHECK(sh.phase() == ShardPhase::deferred_lost);
    sh.hand_back(0, 0);
    CHECK(sh.phase() == ShardPhase::needs_resync);
  }
}

// The shard as a task: its replies, taken by request id, decoded into its slice of base.
namespace {

wire::Reply pull_reply(uint64_t request, uint64_t version, uint64_t round, bool full,
                       const std::vector<float>& values) {
  Bytes payload;
  compression::make_fp32_codec()->encode(values, payload);
  wire::PullReply body{0, version, round, full, {}};
  body.segments.push_back({0, payload.size()});
  wire::Reply r;
  r.header = {request, body};
  r.payloads.push_back(wire::frame_from_bytes(std::move(payload)));
  return r;
}

wire::Reply push_reply(uint64_t request, uint32_t staleness) {
  wire::Reply r;
  r.header = {request, wire::PushReply{0, 1, staleness, 250}};
  return r;
}

// A shard over elements [2, 5) of a table of 6: tensors a, b, c of 2 each.
struct SliceFixture {
  std::vector<float> base = std::vector<float>(6, 0.0f);
  std::vector<float> origin{10, 10, 10, 10, 10, 10};
  ParamTable layout{{{"a", 2}, {"b", 2}, {"c", 2}}, {"b"}};
  TensorMotion motion{layout};
  LeaderShard sh;
  SliceFixture() {
    sh.offset = 2;
    sh.count = 3;
    sh.bind(base, origin, motion);
  }
};

}  // namespace

TEST_CASE(
    "a shard takes only the replies to its own requests, and adds a pulled change to its slice") {
  SliceFixture f;
  f.sh.push(7, 1);
  f.sh.pull(8);
  std::map<uint64_t, wire::Reply> replies;
  replies.emplace(99, push_reply(99, 0));  // another shard's
  replies.emplace(8, pull_reply(8, 5, 3, false, {1, 2, 3}));
  ShardTally tally;
  CHECK(f.sh.take(replies, "r", tally));
  CHECK(replies.size() == 1);                  // its pull taken, the other left
  CHECK(f.sh.phase() == ShardPhase::pushing);  // the push still unanswered
  CHECK(f.base == std::vector<float>{0, 0, 1, 2, 3, 0});
  CHECK(tally.released == 3);
  CHECK(tally.bytes_pulled > 0);
  replies.emplace(7, push_reply(7, 2));
  CHECK(f.sh.take(replies, "r", tally));
  CHECK(f.sh.phase() == ShardPhase::idle);
  CHECK(f.sh.version == 5);
  CHECK(tally.max_staleness == 2);
  CHECK(tally.gate_wait_us == 250);
  CHECK_FALSE(f.sh.take(replies, "r", tally));  // nothing of its own left
}

TEST_CASE(
    "a round's pulls add their changes per tensor to the tensor motion; a start's full pull not") {
  SliceFixture f;
  ShardTally tally;
  std::map<uint64_t, wire::Reply> replies;
  f.sh.full_pull(1, FullPull::start);  // base = origin + values: not a round's change
  replies.emplace(1, pull_reply(1, 1, 0, true, {0, 0, 0}));
  f.sh.take(replies, "r", tally);
  for (const auto& row : f.motion.rows()) CHECK(row.relative_update == 0.0);
  // Two changes, then a round's pull that sent the values (as an fp32 downlink does): origin + 0.
  const std::vector<std::vector<float>> pulled = {{1, 2, 3}, {1, 1, -1}, {0, 0, 0}};
  for (uint64_t k = 0; k < pulled.size(); ++k) {  // a push, its pull right behind it
    const uint64_t push = 10 * (k + 1), pull = push + 1;
    f.sh.push(push, k + 1);
    f.sh.pull(pull);
    replies.emplace(push, push_reply(push, 0));
    replies.emplace(pull, pull_reply(pull, 2 + k, 1 + k, k == 2, pulled[k]));
    f.sh.take(replies, "r", tally);
    REQUIRE(f.sh.phase() == ShardPhase::idle);
    if (k == 1) CHECK(f.base == std::vector<float>{0, 0, 12, 13, 12, 0});
  }
  CHECK(f.base == std::vector<float>{0, 0, 10, 10, 10, 0});
  const auto rows = f.motion.rows();
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].name == "a");
  CHECK(rows[0].relative_update == 0.0);  // outside the shard
  // b: changes (1, 2), (1, 1), (-2, -3); values after (11, 12), (12, 13), (10, 10).
  CHECK(rows[1].relative_update == doctest::Approx(std::sqrt(20.0 / (265.0 + 313.0 + 200.0))));
  CHECK(rows[1].critical);
  CHECK(rows[1].elements == 2);
  // c's first element: changes 3, -1, -2; values after 13, 12, 10.
  CHECK(rows[2].relative_update == doctest::Approx(std::sqrt(14.0 / (169.0 + 144.0 + 100.0))));
  CHECK_FALSE(rows[2].critical);
}

TEST_CASE("tensor motion refuses a range outside the table, and mismatched spans") {
  ParamTable layout{{{"a", 2}, {"b", 3}}, {}};
  TensorMotion motion(layout);
  const std::vector<float> two{1, 1}, three{1, 1, 1};
  CHECK_THROWS_WITH_AS(motion.add(4, two, two), doctest::Contains("[4, 6) lie outside"),
                       InputError);
  CHECK_THROWS_AS(motion.add(0, two, three), InputError);
  motion.add(1, two, two);  // the end of a and the start of b
  const auto rows = motion.rows();
  CHECK(rows[0].relative_update == doctest::Approx(1.0));
  CHECK(rows[1].relative_update == doctest::Approx(1.0));
}

TEST_CASE(
    "a full pull sets the slice to origin + values; a reply of the wrong kind changes nothing") {
  SliceFixture f;
  f.sh.full_pull(4, FullPull::start);
  std::map<uint64_t, wire::Reply> wrong;
  wrong.emplace(4, push_reply(4, 0));
  ShardTally tally;
  CHECK_THROWS_AS(f.sh.take(wrong, "r", tally), InputError);
  CHECK(f.sh.pull_id() == 4u);
  std::map<uint64_t, wire::Reply> replies;
  replies.emplace(4, pull_reply(4, 9, 0, true, {1, 2, 3}));
  f.sh.take(replies, "r", tally);
  CHECK(f.base == std::vector<float>{0, 0, 11, 12, 13, 0});
  CHECK(f.sh.version == 9);
  CHECK(f.sh.phase() == ShardPhase::idle);
  CHECK_FALSE(f.sh.pull_id());
}

TEST_CASE("a resync keeps the region's shift unless the server released our round") {
  SUBCASE("the server lost rounds: the round is pushed again, the rounds between sat out") {
    SliceFixture f;
    f.sh.lost();
    f.sh.full_pull(1, FullPull::resync, 10);  // this region pushes round 10 next
    std::map<uint64_t, wire::Reply> replies;
    replies.emplace(1, pull_reply(1, 3, 6, true, {0, 0, 0}));  // it released round 6
    ShardTally tally;
    f.sh.take(replies, "r", tally);
    CHECK(f.sh.phase() == ShardPhase::idle);
    CHECK(f.sh.expects_next() == 7);
    CHECK(f.sh.server_round(10) == 10);  // the same count as before: 7, 8 and 9 are sat out
    CHECK_FALSE(f.sh.released_round(10));
    CHECK(tally.released == 6);
  }
  SUBCASE("the server released our round already: not pushed again") {
    SliceFixture f;
    f.sh.lost();
    f.sh.full_pull(1, FullPull::resync, 10);
    std::map<uint64_t, wire::Reply> replies;
    replies.emplace(1, pull_reply(1, 3, 10, true, {0, 0, 0}));  // it released our round 10
    ShardTally tally;
    f.sh.take(replies, "r", tally);
    CHECK(f.sh.released_round(10));
    CHECK(f.sh.server_round(11) == 11);  // our next round is its next
  }
  SUBCASE("the server went on without us: our rounds map onto its count from its released one") {
    SliceFixture f;
    f.sh.lost();
    f.sh.full_pull(1, FullPull::resync, 10);
    std::map<uint64_t, wire::Reply> replies;
    replies.emplace(1, pull_reply(1, 3, 12, true, {0, 0, 0}));  // it counts our round 10 as 12
    ShardTally tally;
    f.sh.take(replies, "r", tally);
    CHECK(f.sh.released_round(10));
    CHECK(f.sh.round_shift == -2);
    CHECK(f.sh.server_round(11) == 13);  // our next round is its next
  }
  SUBCASE("a deferred shard merged by the full pull goes back at the region's shift") {
    SliceFixture f;
    f.sh.push(1, 4);
    f.sh.defer(4);
    f.sh.lost();
    f.sh.full_pull(2, FullPull::resync, 10);
    std::map<uint64_t, wire::Reply> replies;
    replies.emplace(2, pull_reply(2, 3, 6, true, {0, 0, 0}));
    ShardTally tally;
    f.sh.take(replies, "r", tally);
    CHECK(f.sh.phase() == ShardPhase::merged);
    f.sh.hand_back(11, 0);  // the exchange that merged it ends: this region pushes 11 next
    CHECK(f.sh.phase() == ShardPhase::idle);
    CHECK(f.sh.server_round(11) == 11);  // 7 to 10 sat out
    CHECK(f.sh.expects_next() == 7);
  }
}

TEST_CASE("a deferred shard merged late sits out the rounds it missed, at the region's shift") {
  LeaderShard sh;
  sh.push(1, 4);  // its server counts the push as round 4
  sh.defer(4);
  sh.push_answered();
  sh.pull(2);
  sh.pulled(9);
  CHECK(sh.expects_next() == 5);
  SUBCASE("the region's shift: rounds 5 to 7 sat out") {
    sh.hand_back(8, 0);  // this region's fragment pushes round 8 next
    CHECK(sh.server_round(8) == 8);
  }
  SUBCASE(
      "a shift that would go back before the round its server expects: the largest that does not") {
    sh.hand_back(8, 5);
    CHECK(sh.round_shift == 3);
    CHECK(sh.server_round(8) == 5);
  }
}

TEST_CASE("a flush: idle -> flushing -> idle, its server holding it") {
  LeaderShard sh;
  sh.flush(3);
  CHECK(sh.phase() == ShardPhase::flushing);
  CHECK_FALSE(sh.exchanging());
  std::map<uint64_t, wire::Reply> replies;
  replies.emplace(3, push_reply(3, 0));
  ShardTally tally;
  sh.take(replies, "r", tally);
  CHECK(sh.phase() == ShardPhase::idle);
  CHECK(sh.flush_held);
}

TEST_CASE("a segment is a matrix when it is whole rows of one matrix tensor") {
  // m: 8 x 16 (cols 16), v: 40 elements, not a matrix.
  const ParamTable table({{"m", 128, 16}, {"v", 40, 0}}, {});
  auto segments_of = [&](uint64_t offset, uint64_t count, Segments cut) {
    wire::ShardInfo info;
    info.offset = offset;
    info.count = count;
    return LeaderShard(info, 0, table, cut, "a").segments;
  };
  for (const Segments cut : {Segments::per_tensor, Segments::per_matrix_rows}) {
    const auto whole = segments_of(0, 168, cut);
    REQUIRE(whole.size() == 2);
    CHECK(whole[0].shape().rows == 8);
    CHECK(whole[0].shape().cols == 16);
    CHECK_FALSE(whole[1].shape().matrix());
    // Rows 2..7 of m: still a matrix.
    const auto rows = segments_of(32, 136, cut);
    CHECK(rows[0].shape().rows == 6);
    CHECK(rows[0].shape().cols == 16);
  }
  // From the middle of row 2: per matrix rows, the rest of row 2 (not a matrix), rows 3..7 (a
  // matrix), v; per tensor (chunk_align: tensor, as before powersgd), m's part whole, no shape.
  const auto cut = segments_of(40, 128, Segments::per_matrix_rows);
  REQUIRE(cut.size() == 3);
  CHECK_FALSE(cut[0].shape().matrix());
  CHECK(cut[1].shape().rows == 5);
  CHECK_FALSE(cut[2].shape().matrix());
  const auto joined = segments_of(40, 128, Segments::per_tensor);
  REQUIRE(joined.size() == 2);
  CHECK(joined[0].count == 88);
  CHECK_FALSE(joined[0].shape().matrix());
  // Segments across tensors (one class): no shape.
  const auto merged = segments_of(0, 168, Segments::per_class);
  REQUIRE(merged.size() == 1);
  CHECK_FALSE(merged[0].shape().matrix());
  // A matrix alone in its shard keeps its shape per class too.
  CHECK(segments_of(0, 128, Segments::per_class)[0].shape().cols == 16);
}

TEST_CASE("an uplink's snapshot keeps powersgd's Q per matrix segment; another codec drops it") {
  const ParamTable table({{"m", 128, 16}, {"v", 40, 0}}, {});
  wire::ShardInfo info;
  info.count = 168;
  const std::vector<LeaderShard> shards = {
      LeaderShard(info, 0, table, Segments::per_matrix_rows, "a")};
  Uplink up("a", "powersgd:rank=2", "powersgd:rank=2", 1.0f);
  std::vector<float> delta(168);
  for (size_t i = 0; i < delta.size(); ++i) delta[i] = std::sin(0.1f * float(i));
  for (const auto& seg : shards[0].segments) {
    Bytes out;
    up.encode(seg.critical, seg.stream, ConstFloatSpan(delta).subspan(seg.offset, seg.count), out,
              seg.shape());
  }
  const auto snapshot = up.residuals();
  const std::string state = fmt::format("noncritical.state.{}", shards[0].segments[0].stream);
  REQUIRE(snapshot.count(state) == 1);
  CHECK(snapshot.at(state).size() == 16 * 2);  // m's Q: 16 columns at rank 2
  CHECK(snapshot.size() == 3);                 // two residuals, one state (v keeps none)

  Uplink same("a", "powersgd:rank=2", "powersgd:rank=2", 1.0f);
  same.restore(snapshot, shards);
  CHECK(same.residuals() == snapshot);
  Uplink other("a", "onebit", "onebit", 1.0f);  // a resume with another codec
  other.restore(snapshot, shards);
  const auto kept = other.residuals();
  CHECK(kept.size() == 2);
  CHECK(kept.count(state) == 0);
}
