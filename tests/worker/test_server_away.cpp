// A server killed mid-run while the leaders defer (SyncConfig::shard_wait): the other regions do
// not wait for its restart. An exchange only looks for the answer of a server that lost the
// region (RegionSync::kAwayLook); until one finds it back, its shards are deferred (their
// parameters local to the region, as for a stopped server's: test_region_rejoin.cpp), and that
// exchange pulls them in full and takes them back. Two regions, two ParamServers over loopback
// TCP (tests/worker/two_servers.hpp), each leader on its own thread.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "tests/worker/two_servers.hpp"
#include "worker/leader/region_sync.hpp"

using namespace geotrain;
using namespace geotrain::test;
using namespace std::chrono_literals;

namespace {
using Clock = std::chrono::steady_clock;
double elapsed_s(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

TEST_CASE(
    "with shard_wait, a killed server costs the other regions no wait while it is away: its shards "
    "are deferred until it is back, then pulled in full") {
  TwoServers two("server-away");
  constexpr int kRounds = 40, kKilledAt = 3, kAwayRounds = 6;
  constexpr auto kDown = 500ms;       // at least, from the kill to the restart (its checkpoint)
  constexpr auto kShardWait = 400ms;  // what an exchange waited for it before (each round)
  // The rounds start together (the two leaders and this thread, which kills and restarts server
  // b between two rounds): both regions find it gone, and back, in the same round.
  std::barrier round_start(3);
  std::atomic<bool> away{false}, failed{false};
  std::atomic<int> rounds_done[2] = {0, 0};
  double first_away[2] = {0, 0}, later_away[2] = {0, 0};  // seconds in exchanges while away
  int exchanges_away[2] = {0, 0}, deferred_away[2] = {0, 0};
  std::vector<std::vector<float>> final_base(2);
  const auto errors = two.run_leaders(
      [&](int r) {
        auto c = two.deferring_leader(r);
        c.shard_wait = kShardWait;
        return c;
      },
      [&](int r, worker::RegionSync& sync) {
        std::vector<float> local(sync.base().begin(), sync.base().end());
        std::vector<ElementRange> deferred;
        const auto ranges = sync.fragment_ranges(0);  // shard s on server s
        const auto is_deferred = [&](const ElementRange& range) {
          return std::find(deferred.begin(), deferred.end(), range) != deferred.end();
        };
        // Server b lost this region (killed) and this region has not rejoined it since: its
        // shard's replies do not come.
        bool b_lost = false;
        uint64_t rejoins_at_kill = 0;
        for (int round = 0; round < kRounds; ++round) {
          round_start.arrive_and_wait();
          if (away && !b_lost) {
            b_lost = true;
            rejoins_at_kill = sync.rejoins();
          }
          if (b_lost && !away && sync.rejoins() > rejoins_at_kill) b_lost = false;
          // A deferred shard of a server that answers is waited for on a loaded machine (server
          // a's throughout, server b's once rejoined), so that both regions push it in the same
          // round: a region that merged it a round before the other would push a round ahead
          // there, and the other region's last push would never be answered
          // (RegionSync::settle). Every round at server a averages both regions' steps.
          const auto waits = [&] {
            return is_deferred(ranges[0]) || (!b_lost && is_deferred(ranges[1]));
          };
          for (int polls = 0; waits() && polls < 2000; ++polls) {
            for (const auto& range : sync.take_ready(0))
              deferred.erase(std::find(deferred.begin(), deferred.end(), range));
            if (waits()) std::this_thread::sleep_for(5ms);
          }
          // A deferred shard keeps its local values; the others step from the global ones.
          for (const auto& range : ranges) {
            if (is_deferred(range)) continue;
            for (uint64_t i = range.offset; i < range.end(); ++i)
              local[i] = sync.base()[i] + step_of(r);
          }
          const bool was_away = away;
          const auto t0 = Clock::now();
          deferred = sync.exchange(local, std::nullopt, /*defer=*/true).deferred;
          if (was_away) {
            (exchanges_away[r] == 0 ? first_away[r] : later_away[r]) += elapsed_s(t0);
            ++exchanges_away[r];
            deferred_away[r] += is_deferred(ranges[1]);
          }
          rounds_done[r] = round + 1;
          std::this_thread::sleep_for(20ms);
        }
        sync.settle();
        CHECK(sync.deferred_shards() == 0);
        final_base[r].assign(sync.base().begin(), sync.base().end());
      },
      [&] {
        std::string endpoint;
        Clock::time_point killed;
        for (int round = 0; round < kRounds; ++round) {
          // Between two rounds: both leaders are done with the last one.
          while (!failed && (rounds_done[0] < round || rounds_done[1] < round))
            std::this_thread::sleep_for(1ms);
          if (round == kKilledAt) {  // region b's server dies
            endpoint = two.kill(1);
            killed = Clock::now();
            away = true;
          } else if (away && round >= kKilledAt + kAwayRounds &&
                     Clock::now() - killed >= kDown) {  // and is started again
            two.come_back(1, endpoint);
            away = false;
          }
          round_start.arrive_and_wait();
        }
      },
      [&](int) {
        failed = true;
        round_start.arrive_and_drop();
      });

  if (!errors[0].empty() || !errors[1].empty())
    FAIL(errors[0] << " / " << errors[1] << "; " << two.describe(0) << "; " << two.describe(1));
  const double wait_s = std::chrono::duration<double>(kShardWait).count();
  for (int r = 0; r < 2; ++r) {
    INFO("region " << two.config.regions[r] << ": " << exchanges_away[r] << " exchanges while "
                   << "away, the first " << first_away[r] << " s, the others " << later_away[r]
                   << " s in all");
    // The region trained on while the server was away: several exchanges, its shard deferred in
    // each. The first found the connection broken during its round and gave the server what
    // was left of the shard wait; the others only looked for its answer (kAwayLook) before
    // pushing to server a, where they used to wait the whole shard wait each.
    REQUIRE(exchanges_away[r] >= kAwayRounds);
    CHECK(deferred_away[r] == exchanges_away[r]);
    CHECK(first_away[r] < 2 * wait_s);
    CHECK(later_away[r] < (exchanges_away[r] - 1) * wait_s / 2);
  }
  CHECK_FALSE(away);
  // Server a's shard never left: every round averaged both regions' steps (0.01 and 0.02).
  const auto& kept = two.servers[0].server->shards().at(0).range();
  for (int r = 0; r < 2; ++r) {
    size_t off = 0;
    for (uint64_t i = kept.offset; i < kept.offset + kept.count; ++i)
      off += std::fabs(final_base[r][i] - 0.015f * kRounds) > 1e-3f;
    CHECK_MESSAGE(off == 0, "region " << r);
  }
  // Both regions hold the same global model at the end, server b's shard included.
  CHECK(final_base[0] == final_base[1]);
  for (float v : final_base[0]) REQUIRE(std::isfinite(v));
}
