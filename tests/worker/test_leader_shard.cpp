// A leader's shard phases (worker/leader_shard.hpp): each path of the exchange through its
// transitions. (A transition from a phase that does not allow it is a GT_ASSERT: it aborts, so
// it is not tested here.)
#include <doctest/doctest.h>

#include "worker/leader_shard.hpp"

using namespace geotrain;
using namespace geotrain::worker;

TEST_CASE("a pipelined push and pull: idle -> pushing -> pulling -> idle") {
  LeaderShard sh;
  sh.push(7);
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
  sh.push(1);
  sh.push_answered();
  CHECK(sh.phase() == ShardPhase::pushed);
  sh.pull(2);
  CHECK(sh.phase() == ShardPhase::pulling);
  sh.pulled(3);
  CHECK(sh.phase() == ShardPhase::idle);
}

TEST_CASE("a pull answered before its push stays pushing") {
  LeaderShard sh;
  sh.push(1);
  sh.pull(2);
  sh.pulled(5);
  CHECK(sh.phase() == ShardPhase::pushing);
  CHECK(sh.push_id() == 1u);
  CHECK_FALSE(sh.pull_id());
}

TEST_CASE("deferred: in flight past the exchange, merged when the pull comes, handed back") {
  LeaderShard sh;
  sh.push(10);
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
  sh.hand_back();
  CHECK(sh.phase() == ShardPhase::idle);
  CHECK_FALSE(sh.deferred());
}

TEST_CASE("a lost server: needs a full pull; a deferred shard stays deferred until it") {
  SUBCASE("in step") {
    LeaderShard sh;
    sh.push(1);
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
    sh.push(1);
    sh.pull(2);
    sh.defer(3);
    sh.lost();
    CHECK(sh.phase() == ShardPhase::deferred_lost);
    CHECK(sh.deferred());
    CHECK_FALSE(sh.in_flight());
    CHECK_FALSE(sh.pull_id());
    sh.resynced(8);
    CHECK(sh.phase() == ShardPhase::merged);
    sh.hand_back();
    CHECK(sh.phase() == ShardPhase::idle);
  }
  SUBCASE("merged, then lost: handed back with a full pull due") {
    LeaderShard sh;
    sh.push(1);
    sh.defer(3);
    sh.push_answered();
    sh.pull(2);
    sh.pulled(4);
    sh.lost();
    CHECK(sh.phase() == ShardPhase::deferred_lost);
    sh.hand_back();
    CHECK(sh.phase() == ShardPhase::needs_resync);
  }
}
