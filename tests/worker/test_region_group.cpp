// The elastic region group: members as threads of one process, meeting at a real server's
// key-value exchange over Gloo's TCP transport. A member "dies" by dropping its communicator (its
// sockets close, as a killed process's do); the others' next collective fails, they re-form
// without it, and it comes back as a joiner.
#include <doctest/doctest.h>

#include <future>
#include <thread>

#include "region_server.hpp"
#include "worker/region/gloo_communicator.hpp"
#include "worker/region/region_group.hpp"
#include "worker/region/server_store.hpp"

using namespace geotrain;
using namespace std::chrono_literals;

namespace {

worker::RegionGroup::Connect gloo_connect() {
  return [](gloo::rendezvous::Store& store, int rank, int size) {
    return std::make_unique<worker::GlooCommunicator>(store, rank, size,
                                                      worker::GlooOptions{"127.0.0.1", 10s});
  };
}

// The sum over the group of (slot + 1).
float slot_sum(worker::RegionGroup& g) {
  std::vector<float> v(4096, float(g.slot() + 1));
  g.comm().allreduce_sum(v);
  for (const float x : v) REQUIRE(x == v[0]);
  return v[0];
}

}  // namespace

TEST_CASE("a region's group outlives a dead member and takes it back when it rejoins") {
  test::RegionServer server("group-a");
  auto store0 = server.store(), store1 = server.store(), store2 = server.store();
  auto f1 = std::async(std::launch::async,
                       [&] { return worker::RegionGroup(*store1, 1, 3, gloo_connect()); });
  auto f2 = std::async(std::launch::async,
                       [&] { return worker::RegionGroup(*store2, 2, 3, gloo_connect()); });
  worker::RegionGroup g0(*store0, 0, 3, gloo_connect());
  auto g1 = f1.get();
  auto g2 = f2.get();
  auto s1 = std::async(std::launch::async, [&] { return slot_sum(g1); });
  auto s2 = std::async(std::launch::async, [&] { return slot_sum(g2); });
  CHECK(slot_sum(g0) == 6.0f);
  CHECK(s1.get() == 6.0f);
  CHECK(s2.get() == 6.0f);

  // Slot 2 dies: its sockets close; the survivors' next collective fails at once.
  g2.disconnect();
  auto broken1 = std::async(std::launch::async, [&] {
    CHECK_THROWS_AS(slot_sum(g1), worker::GroupBroken);
    return g1.regroup(2s);
  });
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(slot_sum(g0), worker::GroupBroken);
  const auto change0 = g0.regroup(300ms);
  const auto change1 = broken1.get();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(change0.epoch == 1);
  CHECK(change0.members == std::vector<uint32_t>{0, 1});
  CHECK(change0.lost == std::vector<uint32_t>{2});
  CHECK(change1.members == std::vector<uint32_t>{0, 1});
  CHECK(change1.lost == std::vector<uint32_t>{2});
  CHECK(seconds < 2.0);  // the leader's 0.3 s window for the dead member, then a new mesh
  s1 = std::async(std::launch::async, [&] { return slot_sum(g1); });
  CHECK(slot_sum(g0) == 3.0f);
  CHECK(s1.get() == 3.0f);
  CHECK_FALSE(g0.joiners_waiting());

  // Slot 2 restarts and asks to join; the leader sees it and the group re-forms with it.
  auto store2b = server.store();
  auto joiner = std::async(std::launch::async, [&] {
    return worker::RegionGroup::join(*store2b, 2, 3, gloo_connect(), 20s);
  });
  for (int i = 0; i < 200 && !g0.joiners_waiting(); ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(g0.joiners_waiting());
  auto again1 = std::async(std::launch::async, [&] { return g1.regroup(2s); });
  const auto change = g0.regroup(2s);
  CHECK(change.epoch == 2);
  CHECK(change.members == std::vector<uint32_t>{0, 1, 2});
  CHECK(change.joined == std::vector<uint32_t>{2});
  CHECK(change.lost.empty());
  CHECK(again1.get().joined == std::vector<uint32_t>{2});
  auto g2b = joiner.get();
  REQUIRE(g2b.has_value());
  CHECK(g2b->epoch() == 2);
  s1 = std::async(std::launch::async, [&] { return slot_sum(g1); });
  s2 = std::async(std::launch::async, [&] { return slot_sum(*g2b); });
  CHECK(slot_sum(g0) == 6.0f);
  CHECK(s1.get() == 6.0f);
  CHECK(s2.get() == 6.0f);
  // Admitted once: the same request is not a joiner again.
  CHECK_FALSE(g0.joiners_waiting());
}

TEST_CASE("a member that announces itself after the leader's window is left out and told so") {
  test::RegionServer server("group-b");
  auto store0 = server.store(), store1 = server.store();
  auto f1 = std::async(std::launch::async,
                       [&] { return worker::RegionGroup(*store1, 1, 2, gloo_connect()); });
  worker::RegionGroup g0(*store0, 0, 2, gloo_connect());
  auto g1 = f1.get();
  // The leader re-forms alone (its member is slow); the member comes too late.
  const auto change = g0.regroup(100ms);
  CHECK(change.members == std::vector<uint32_t>{0});
  CHECK(change.lost == std::vector<uint32_t>{1});
  CHECK_THROWS_WITH_AS(g1.regroup(100ms), doctest::Contains("slot 1 was left out"), SystemError);
}

TEST_CASE("a joiner waiting when the leader closes the group leaves without joining") {
  test::RegionServer server("group-c");
  auto store0 = server.store(), store1 = server.store();
  auto f1 = std::async(std::launch::async,
                       [&] { return worker::RegionGroup(*store1, 1, 2, gloo_connect()); });
  worker::RegionGroup g0(*store0, 0, 2, gloo_connect());
  auto g1 = f1.get();
  g1.disconnect();
  (void)g0.regroup(100ms);  // alone now
  auto store1b = server.store();
  auto joiner = std::async(std::launch::async, [&] {
    return worker::RegionGroup::join(*store1b, 1, 2, gloo_connect(), 20s);
  });
  std::this_thread::sleep_for(100ms);
  g0.close();
  CHECK_FALSE(joiner.get().has_value());
  // A slot that cannot join (the leader's, or past the region) is refused by name.
  CHECK_THROWS_WITH_AS(worker::RegionGroup::join(*store1b, 0, 2, gloo_connect(), 1s),
                       doctest::Contains("slot 0 cannot join"), InputError);
}

TEST_CASE(
    "a leader started again finds the members that outlived it where they wait, even when the "
    "server lost the epoch it formed last") {
  test::RegionServer server("group-d");
  auto store0 = server.store(), store1 = server.store();
  auto f1 = std::async(std::launch::async,
                       [&] { return worker::RegionGroup(*store1, 1, 2, gloo_connect()); });
  worker::RegionGroup g0(*store0, 0, 2, gloo_connect());
  auto g1 = f1.get();
  for (int i = 0; i < 2; ++i) {  // two re-formations with both alive: epoch 2
    auto again = std::async(std::launch::async, [&] { return g1.regroup(2s); });
    CHECK(g0.regroup(2s).members == std::vector<uint32_t>{0, 1});
    CHECK(again.get().epoch == uint64_t(i) + 1);
  }
  // The leader dies; its member notices at its next collective and waits at epoch 3.
  g0.disconnect();
  auto waiting = std::async(std::launch::async, [&] {
    CHECK_THROWS_AS(slot_sum(g1), worker::GroupBroken);
    return g1.regroup(2s);
  });
  std::this_thread::sleep_for(200ms);
  // What a restarted server's store would say of the last epoch the leader formed: nothing
  // useful (here: a stale value).
  server.store()->set("epoch", {'0'});
  auto store0b = server.store();
  // Its one member has announced itself already: the leader does not wait out the settle time
  // (here far longer than the test).
  const auto t0 = std::chrono::steady_clock::now();
  auto led = worker::RegionGroup::lead_again(*store0b, 2, gloo_connect(), 30s);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  REQUIRE(led.has_value());
  CHECK(led->epoch() == 3);
  CHECK(led->members() == std::vector<uint32_t>{0, 1});
  const auto change = waiting.get();
  CHECK(change.fresh_leader);
  CHECK(change.epoch == 3);
  auto s1 = std::async(std::launch::async, [&] { return slot_sum(g1); });
  CHECK(slot_sum(*led) == 3.0f);
  CHECK(s1.get() == 3.0f);
}
