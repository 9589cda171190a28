// RegionSync when a server goes away mid-run and comes back on the same address from its
// checkpoint (what `geotrain run` does under run.restart): two regions, two ParamServers over
// loopback TCP, each leader on its own thread. With fp32 codecs, plain averaging (outer lr 1, no
// momentum) and synchronous rounds of critical tensors only, the lost rounds are re-pushed
// exactly: every leader must end with the closed-form values, as if nothing had happened.
// (Non-critical tensors, applied on arrival, come back only approximately: docs/run.md.)
// Then a server that stops for a while (its loop does not run, as under SIGSTOP) with
// SyncConfig::shard_wait: the leaders defer its shards, go on with the other server's, and merge
// them late, every region the same rounds; regions that merged them in different rounds, each a
// push ahead on a shard, end their run with the flush without waiting for each other. (The
// rounds a region sits out: test_sit_out.cpp; how long it waits: test_shard_wait.cpp.)
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <deque>
#include <functional>
#include <thread>

#include "compression/factory.hpp"
#include "server/param_server.hpp"
#include "tests/worker/two_servers.hpp"
#include "wire/channel.hpp"
#include "wire/client.hpp"
#include "worker/config.hpp"
#include "worker/leader/region_sync.hpp"
#include "worker/leader/reply_wait.hpp"

using namespace geotrain;
using namespace geotrain::test;
using namespace std::chrono_literals;

namespace {

// Values of `x` more than 1e-4 away from `want`.
size_t count_off(ConstFloatSpan x, float want) {
  return static_cast<size_t>(
      std::count_if(x.begin(), x.end(), [&](float v) { return std::fabs(v - want) > 1e-4f; }));
}

// `rounds` synchronous rounds of region r, each its step from the global values then the
// exchange (after `pause`); `done` counts them. Returns its local parameters, a step ahead.
std::vector<float> step_rounds(worker::RegionSync& sync, int r, int rounds, std::atomic<int>& done,
                               std::chrono::milliseconds pause = {}) {
  std::vector<float> local(sync.base().size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < local.size(); ++i) local[i] = sync.base()[i] + step_of(r);
    std::this_thread::sleep_for(pause);
    sync.exchange(local);
    done = round + 1;
  }
  for (size_t i = 0; i < local.size(); ++i) local[i] = sync.base()[i] + step_of(r);
  return local;
}

}  // namespace

TEST_CASE("leaders rejoin a server restarted from its checkpoint and re-push the lost rounds") {
  TwoServers two("rejoin");
  constexpr int kRounds = 12;
  std::atomic<int> rounds_done[2] = {0, 0};
  std::vector<std::vector<float>> final_base(2);
  std::vector<uint64_t> rejoins(2);
  const auto leader = [&](int r) { return two.leader(r); };
  const auto train = [&](int r, worker::RegionSync& sync) {
    step_rounds(sync, r, kRounds, rounds_done[r], 20ms);
    final_base[r].assign(sync.base().begin(), sync.base().end());
    rejoins[r] = sync.rejoins();
  };
  const auto errors = two.run_leaders(leader, train, [&] {
    // Region b's server dies after round 4 (in-flight requests are lost), and comes back on the
    // same address 300 ms later, restoring its newest checkpoint.
    while (rounds_done[0] < 4 || rounds_done[1] < 4) std::this_thread::sleep_for(1ms);
    two.restart(1, 300ms);
  });

  for (int r = 0; r < 2; ++r) {
    INFO("region " << two.config.regions[r] << ": " << errors[r]);
    REQUIRE(errors[r].empty());
    CHECK(rejoins[r] >= 1);
    // Every round averages 0.01 and 0.02: 12 rounds move every parameter by 0.18.
    CHECK(count_off(final_base[r], 0.015f * kRounds) == 0);
  }
}

TEST_CASE(
    "a server restarted from its checkpoint during the flush: every region rejoins it, flushes "
    "again what it lost, and ends with the same global model") {
  TwoServers two("flush-restart");
  constexpr int kRounds = 3;
  std::atomic<int> rounds_done[2] = {0, 0};
  std::atomic<bool> a_flushing{false}, b_may_flush{false};
  std::vector<std::vector<float>> final_base(2);
  std::vector<uint64_t> rejoins(2);
  const auto leader = [&](int r) { return two.leader(r); };
  const auto train_and_flush = [&](int r, worker::RegionSync& sync) {
    // The flush owes one more step.
    auto local = step_rounds(sync, r, kRounds, rounds_done[r]);
    if (r == 0) a_flushing = true;
    while (r == 1 && !b_may_flush) std::this_thread::sleep_for(1ms);
    rejoins[r] = sync.flush(local).rejoins;
    final_base[r].assign(sync.base().begin(), sync.base().end());
  };
  const auto errors = two.run_leaders(leader, train_and_flush, [&] {
    // Region a flushes to both servers and waits at its final pulls for b; then region b's
    // server dies (what it held of a's flush with it) and comes back on the same address from
    // its checkpoint of the last round; then b flushes.
    while (!a_flushing || rounds_done[1] < kRounds) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(300ms);
    two.restart(1, 300ms);
    b_may_flush = true;
  });

  for (int r = 0; r < 2; ++r) {
    INFO("region " << two.config.regions[r] << ": " << errors[r]);
    REQUIRE(errors[r].empty());
    CHECK(rejoins[r] >= 1);
    // kRounds rounds and the flush each average 0.01 and 0.02, the same in both regions.
    CHECK(count_off(final_base[r], 0.015f * (kRounds + 1)) == 0);
    CHECK(final_base[r] == final_base[0]);
  }
}

TEST_CASE(
    "a deferred shard whose server restarted before the flush is pulled in full and flushed at "
    "the round the restarted server counts") {
  TwoServers two("flush-deferred-restart");
  auto& servers = two.servers;
  constexpr int kRounds = 3;
  std::barrier round_start(3);  // the two leaders and this thread
  std::atomic<int> rounds_done[2] = {0, 0};
  std::atomic<bool> restarted{false};
  std::vector<std::vector<float>> final_base(2);
  std::vector<std::vector<ElementRange>> deferred(2);
  const auto errors =
      two.run_leaders([&](int r) { return two.deferring_leader(r); },
                      [&](int r, worker::RegionSync& sync) {
                        const float step = 0.01f * static_cast<float>(r + 1);
                        std::vector<float> local(sync.base().size());
                        for (int round = 0; round < kRounds; ++round) {
                          round_start.arrive_and_wait();
                          for (size_t i = 0; i < local.size(); ++i)
                            local[i] = sync.base()[i] + step;
                          deferred[r] = sync.exchange(local, std::nullopt, /*defer=*/true).deferred;
                          rounds_done[r] = round + 1;
                        }
                        round_start.arrive_and_wait();  // the last round is over
                        while (!restarted) std::this_thread::sleep_for(1ms);
                        // No progress after the last round: a shard merged at the flush takes the
                        // global values.
                        std::copy(sync.base().begin(), sync.base().end(), local.begin());
                        sync.flush(local, [&](const ElementRange& range) {
                          for (uint64_t i = range.offset; i < range.end(); ++i)
                            local[i] = sync.base()[i];
                        });
                        final_base[r].assign(sync.base().begin(), sync.base().end());
                      },
                      [&] {
                        // Region b's server stops before the last round (its shards are deferred in
                        // it), then dies and comes back from its checkpoint of round kRounds - 1;
                        // then the regions flush.
                        for (int round = 0; round < kRounds - 1; ++round)
                          round_start.arrive_and_wait();
                        while (rounds_done[0] < kRounds - 1 || rounds_done[1] < kRounds - 1)
                          std::this_thread::sleep_for(1ms);
                        two.stop_loop(1);
                        round_start.arrive_and_wait();  // the last round starts
                        round_start.arrive_and_wait();  // and is over, b's shards deferred
                        two.restart(1);
                        restarted = true;
                      },
                      [&](int) { round_start.arrive_and_drop(); });

  for (int r = 0; r < 2; ++r) {
    INFO("region " << two.config.regions[r] << ": " << errors[r]);
    REQUIRE(errors[r].empty());
    CHECK_FALSE(deferred[r].empty());
    REQUIRE(final_base[r].size() ==
            ParamTable(two.config.tensors, two.config.critical).total_elements());
  }
  // Server a's shards: every round, 0.015 each; server b's: the last round was lost with it.
  size_t wrong = 0;
  for (const auto& sh : servers[0].server->shards())
    for (uint64_t i = sh.range().offset; i < sh.range().offset + sh.range().count; ++i)
      wrong += std::fabs(final_base[0][i] - 0.015f * kRounds) > 1e-4f;
  for (const auto& sh : servers[1].server->shards())
    for (uint64_t i = sh.range().offset; i < sh.range().offset + sh.range().count; ++i)
      wrong += std::fabs(final_base[0][i] - 0.015f * (kRounds - 1)) > 1e-4f;
  CHECK(wrong == 0);
  CHECK(final_base[0] == final_base[1]);
}

TEST_CASE(
    "with shard_wait, a stopped server's shards are deferred while the other server's go "
    "on, and every region merges them when it resumes") {
  TwoServers two("defer");
  const auto& config = two.config;
  auto& servers = two.servers;
  const ParamTable table(config.tensors, config.critical);
  constexpr int kRounds = 60;
  DeferringLeaders fleet{two, kRounds};
  // Region b's server stops for 0.6 s after round 4, as under SIGSTOP: its loop does not run,
  // requests wait in its socket, and then it goes on with them.
  fleet.run([&] {
    fleet.wait_for_round(4);
    fleet.stop(1);
    std::this_thread::sleep_for(600ms);
    fleet.resume(1);
  });
  const auto& errors = fleet.errors;
  const auto& final_base = fleet.final_base;
  const auto& while_stopped = fleet.while_stopped;
  const auto& deferring = fleet.deferring;
  const auto& late = fleet.late;

  for (int r = 0; r < 2; ++r) {
    INFO("region " << config.regions[r] << ": " << errors[r]);
    REQUIRE(errors[r].empty());
    // Without deferring, no exchange ends while a server is stopped (each waits for it).
    CHECK(while_stopped[r] >= 5);
    CHECK(deferring[r] >= 5);
    CHECK(late[r] >= 1);
    REQUIRE(final_base[r].size() == table.total_elements());
  }
  // Every released round averages 0.01 and 0.02: each value is 0.015 times the rounds its shard
  // was released in, the same in both regions; the stopped server's shards skipped some.
  int fewest = kRounds, most = 0;
  size_t wrong = 0;
  for (size_t i = 0; i < final_base[0].size(); ++i) {
    const float k = final_base[0][i] / 0.015f;
    wrong += std::fabs(k - std::round(k)) > 1e-3f || final_base[0][i] != final_base[1][i];
    fewest = std::min(fewest, static_cast<int>(std::lround(k)));
    most = std::max(most, static_cast<int>(std::lround(k)));
  }
  CHECK(wrong == 0);
  CHECK(fewest < kRounds);
  CHECK(fewest >= 1);
  CHECK(most <= kRounds);

  // The regions restart (as from snapshots of round kRounds): the stopped server counts the
  // rounds they sat out there too (wire::Push::skip), so both servers expect kRounds + 1.
  std::vector<std::string> again_errors(2);
  std::vector<std::vector<float>> again(2);
  std::vector<uint64_t> plain_next(2), resumed_next(2);
  {
    std::vector<std::jthread> restarted;
    for (int r = 0; r < 2; ++r)
      restarted.emplace_back([&, r] {
        try {
          wire::Context context;
          const auto c = leader_config(config, r, servers[0].server->endpoint(),
                                       servers[1].server->endpoint());
          plain_next[r] = worker::RegionSync(table, c, context).connect();
          worker::RegionSync sync(table, c, context);
          resumed_next[r] = sync.connect(kRounds + 1);
          std::vector<float> local(sync.base().begin(), sync.base().end());
          for (float& v : local) v += 0.01f * static_cast<float>(r + 1);
          sync.exchange(local);
          again[r].assign(sync.base().begin(), sync.base().end());
        } catch (const std::exception& e) {
          again_errors[r] = e.what();
        }
      });
  }
  for (int r = 0; r < 2; ++r) {
    INFO("region " << config.regions[r] << " restarted: " << again_errors[r]);
    REQUIRE(again_errors[r].empty());
    CHECK(plain_next[r] == kRounds + 1);
    CHECK(resumed_next[r] == kRounds + 1);
  }
  wrong = 0;
  for (size_t i = 0; i < again[0].size(); ++i)
    wrong +=
        again[0][i] != again[1][i] || std::fabs(again[0][i] - final_base[0][i] - 0.015f) > 1e-5f;
  CHECK(wrong == 0);
}

TEST_CASE(
    "at the end, two regions each a push ahead on a deferred shard of its own flush without "
    "waiting for each other") {
  // Two fragments, each cut into a shard per server: A0, B0 (fragment 0), A1, B1 (fragment 1).
  // Region a's server stops; both regions defer A0 and A1. When it runs again, region a merges
  // A0 (not A1) and region b merges A1 (not A0), as two regions whose replies came at different
  // moments would; their next exchanges push A0 once more in region a and A1 once more in b, and
  // wait there for the other's push, which never comes: the run ends. settle() would wait for
  // each other's push until the timeout; the flush sends the deferred shards last, each once it
  // has merged, so region b's flush of A0 releases region a's extra round there, and a's flush of
  // A1 releases b's.
  TwoServers two("flush-deferred", 2);
  const auto& config = two.config;
  auto& servers = two.servers;
  const ParamTable table(config.tensors, config.critical);
  std::barrier step(3);      // the two leaders and this thread
  std::barrier fragment(2);  // the two leaders, between fragments: each fragment's exchanges
                             // start together, or one region's wait for A0 would run into the
                             // other's shard_wait for B1
  std::vector<std::vector<float>> final_base(2);
  std::vector<std::string> errors(2);
  std::vector<ElementRange> a_shard(2);  // per fragment: the range of region a's server's shard
  std::vector<std::jthread> leaders;
  for (int r = 0; r < 2; ++r)
    leaders.emplace_back([&, r] {
      try {
        wire::Context context;
        auto c = two.deferring_leader(r);
        c.timeout = 5s;  // what settle() would wait out
        worker::RegionSync sync(table, c, context);
        sync.connect();
        auto expect = [](bool ok, const char* what) {  // (REQUIRE is for the test's thread)
          if (!ok) throw std::runtime_error(what);
        };
        expect(sync.config().fragments == 2, "two fragments");
        const float progress = 0.01f * static_cast<float>(r + 1);
        std::vector<float> local(sync.base().begin(), sync.base().end());
        auto start = [&](const ElementRange& range) {  // a shard trains again from base
          for (uint64_t i = range.offset; i < range.end(); ++i)
            local[i] = sync.base()[i] + progress;
        };
        auto exchange_both = [&] {
          std::vector<std::vector<ElementRange>> deferred(2);
          for (uint32_t p = 0; p < 2; ++p) {
            fragment.arrive_and_wait();
            deferred[p] = sync.exchange(local, p, /*defer=*/true).deferred;
          }
          fragment.arrive_and_wait();  // (the other region's flush would release a round)
          return deferred;
        };
        for (uint32_t p = 0; p < 2; ++p)
          for (const auto& range : sync.fragment_ranges(p)) start(range);
        exchange_both();  // round 1: nothing deferred
        for (uint32_t p = 0; p < 2; ++p)
          for (const auto& range : sync.fragment_ranges(p)) start(range);
        step.arrive_and_wait();  // (region a's server stops)
        step.arrive_and_wait();
        const auto deferred = exchange_both();  // round 2: A0 and A1 deferred
        for (uint32_t p = 0; p < 2; ++p) {
          expect(deferred[p].size() == 1, "one shard of each fragment deferred");
          if (r == 0) a_shard[p] = deferred[p][0];
          // The shard that is not deferred trains on.
          for (const auto& range : sync.fragment_ranges(p))
            if (range != deferred[p][0]) start(range);
        }
        step.arrive_and_wait();  // (it runs again)
        step.arrive_and_wait();
        // Region a merges fragment 0's deferred shard, region b fragment 1's, once they came.
        const uint32_t mine = static_cast<uint32_t>(r);
        std::vector<ElementRange> merged;
        for (int polls = 0; merged.empty() && polls < 2000; ++polls) {
          merged = sync.take_ready(mine);
          if (merged.empty()) std::this_thread::sleep_for(5ms);
        }
        expect(merged.size() == 1, "the deferred shard merged");
        start(merged[0]);
        // Round 3: the merged shard is pushed once more than in the other region, and deferred.
        const auto last = exchange_both();
        CHECK(last[mine].size() == 1);
        CHECK(sync.deferred_shards() == 2);
        // The end of the run: no progress since the last exchanges (local = base), and a
        // deferred shard's push carried all of its progress.
        std::copy(sync.base().begin(), sync.base().end(), local.begin());
        sync.flush(local, [&](const ElementRange& range) {
          std::copy(sync.base().begin() + range.offset, sync.base().begin() + range.end(),
                    local.begin() + range.offset);
        });
        CHECK(sync.deferred_shards() == 0);
        final_base[r].assign(sync.base().begin(), sync.base().end());
        sync.goodbye(1s);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        step.arrive_and_drop();  // the others go on
        fragment.arrive_and_drop();
      }
    });
  step.arrive_and_wait();
  servers[0].thread.request_stop();
  servers[0].thread.join();
  step.arrive_and_wait();
  step.arrive_and_wait();  // both deferred A0 and A1
  auto* a = servers[0].server.get();
  servers[0].thread = std::jthread([a](std::stop_token st) { a->run(st); });
  step.arrive_and_drop();
  leaders.clear();  // joins

  for (int r = 0; r < 2; ++r) {
    INFO("region " << config.regions[r] << ": " << errors[r]);
    REQUIRE(errors[r].empty());
  }
  CHECK(final_base[0] == final_base[1]);
  // Plain averaging: every round both regions pushed moves a value by 0.015. B0 and B1: rounds
  // 1-3. A0: rounds 1-2 both (0.03), then round 3 region a's alone (+0.01) in region a's copy:
  // the final model is the mean of the copies, 0.035. A1: 0.03, and b's alone (+0.02): 0.04.
  size_t wrong = 0;
  for (uint64_t i = 0; i < table.total_elements(); ++i) {
    float want = 0.045f;
    if (a_shard[0].offset <= i && i < a_shard[0].end()) want = 0.035f;
    if (a_shard[1].offset <= i && i < a_shard[1].end()) want = 0.04f;
    wrong += std::fabs(final_base[0][i] - want) > 1e-5f;
  }
  CHECK(wrong == 0);
}

namespace {

// A connection that sends everything, never answers, and has lost `lost` messages from the
// server (a striped reply aborted on a lane).
class SilentChannel final : public wire::Channel {
 public:
  explicit SilentChannel(const std::atomic<uint64_t>& lost) : lost_(lost) {}
  std::string endpoint() const override { return "inproc://silent"; }
  bool send(wire::Envelope&&) override { return true; }
  std::optional<wire::Envelope> receive(std::chrono::milliseconds timeout) override {
    std::this_thread::sleep_for(std::min(timeout, std::chrono::milliseconds(5)));
    return std::nullopt;
  }
  uint64_t messages_lost() override { return lost_; }

 private:
  const std::atomic<uint64_t>& lost_;
};

}  // namespace

TEST_CASE(
    "a reply lost on a striped lane (a restarted server that could not reach a lane yet) ends the "
    "wait at once with ServerLost, so the leader rejoins instead of waiting out its timeout") {
  std::atomic<uint64_t> lost{0};
  wire::Client client(std::make_unique<SilentChannel>(lost));
  const auto id = client.send(wire::Heartbeat{});
  REQUIRE(id.has_value());
  worker::ReplyWait how;
  how.disconnects_seen = client.channel().breaks();
  // Nothing lost: the wait runs to its timeout.
  CHECK_THROWS_AS(worker::collect(client, "b", {*id}, 50ms, "full pull (rejoined)", how),
                  SystemError);
  // A message lost since the request was sent: ServerLost long before the 60 s timeout.
  std::thread lose([&] {
    std::this_thread::sleep_for(50ms);
    lost = 1;
  });
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(worker::collect(client, "b", {*id}, 60s, "full pull (rejoined)", how),
                       doctest::Contains("lost on a striped lane"), worker::ServerLost);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  lose.join();
}

namespace {

// A fake server connection: what send() decides to answer is queued and handed out by receive().
class AnsweringChannel : public wire::Channel {
 public:
  std::optional<wire::Envelope> receive(std::chrono::milliseconds timeout) override {
    if (replies_.empty()) {
      std::this_thread::sleep_for(std::min(timeout, std::chrono::milliseconds(5)));
      return std::nullopt;
    }
    auto r = std::move(replies_.front());
    replies_.pop_front();
    return r;
  }

 protected:
  void answer(uint64_t request_id, wire::Body body) {
    wire::Envelope reply{{}, {}};
    reply.frames.push_back(wire::encode_header(wire::Header{request_id, std::move(body)}));
    replies_.push_back(std::move(reply));
  }

 private:
  std::deque<wire::Envelope> replies_;
};

// A server that answers heartbeats at once and holds every other request (a final pull waiting
// for the slowest region's flush); `answering` false: silent.
class HoldingChannel final : public AnsweringChannel {
 public:
  explicit HoldingChannel(const std::atomic<bool>& answering) : answering_(answering) {}
  std::string endpoint() const override { return "inproc://holding"; }
  bool send(wire::Envelope&& message) override {
    const auto h = wire::decode_header(message.frames.front());
    if (std::holds_alternative<wire::Heartbeat>(h.body) && answering_)
      answer(h.request_id, wire::Ack{});
    return true;
  }

 private:
  const std::atomic<bool>& answering_;
};

}  // namespace

TEST_CASE(
    "the final pull waits as long as its server answers probes, and gives up once it has been "
    "silent for the timeout") {
  std::atomic<bool> answering{true};
  wire::Client client(std::make_unique<HoldingChannel>(answering));
  const auto id = client.send(wire::PullRequest{0, 0, true, 0, true});
  REQUIRE(id.has_value());
  worker::ReplyWait how;
  how.probe = 20ms;
  how.while_answered = true;
  // Answered probes: past three times the 150 ms timeout, still waiting.
  std::thread silence([&] {
    std::this_thread::sleep_for(600ms);
    answering = false;
  });
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(worker::collect(client, "b", {*id}, 150ms, "final pull", how),
                       doctest::Contains("was silent for 150 ms"), SystemError);
  const auto waited = std::chrono::steady_clock::now() - t0;
  silence.join();
  CHECK(waited >= 600ms);
  CHECK(waited < 5s);
  // A plain wait gives up at its timeout, probes answered or not.
  answering = true;
  how.while_answered = false;
  const auto t1 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(worker::collect(client, "b", {*id}, 150ms, "final pull", how),
                       doctest::Contains("within 150 ms"), SystemError);
  CHECK(std::chrono::steady_clock::now() - t1 < 600ms);
}

namespace {

// A server that answers each request, in order, with the next of `answers`.
class ScriptedChannel final : public AnsweringChannel {
 public:
  explicit ScriptedChannel(std::deque<wire::Body> answers) : answers_(std::move(answers)) {}
  std::string endpoint() const override { return "inproc://scripted"; }
  bool send(wire::Envelope&& message) override {
    const auto h = wire::decode_header(message.frames.front());
    REQUIRE(!answers_.empty());
    answer(h.request_id, std::move(answers_.front()));
    answers_.pop_front();
    return true;
  }

 private:
  std::deque<wire::Body> answers_;
};

}  // namespace

TEST_CASE(
    "a refusal parked while another wait ran is a lost place when its own wait takes it, not an "
    "answer of the wrong type") {
  // The deferred push is refused (badRound: the server counts the region's rounds otherwise, as
  // after a restarted netsim) while the leader waits for another request; that wait parks it.
  wire::Client client(std::make_unique<ScriptedChannel>(std::deque<wire::Body>{
      wire::Error{wire::ErrorCode::bad_round, "round 7 was released"}, wire::Ack{}}));
  const auto deferred = client.send(wire::Heartbeat{});
  const auto other = client.send(wire::Heartbeat{});
  REQUIRE((deferred && other));
  std::map<uint64_t, wire::Reply> parked;
  worker::ReplyWait how;
  how.parked = &parked;
  how.parked_ids = {*deferred};
  CHECK(worker::collect(client, "b", {*other}, 1s, "push and pull", how).size() == 1);
  REQUIRE(parked.count(*deferred) == 1);
  how.parked_ids.clear();
  CHECK_THROWS_WITH_AS(worker::collect(client, "b", {*deferred}, 1s, "deferred push and pull", how),
                       doctest::Contains("(badRound): rejoining it"), worker::ServerLost);
  CHECK(parked.empty());
}

namespace {

// A server that answers heartbeats at once, listing the requests it "answered": every other
// request it got, whose replies it loses (a connection that broke after the server queued them).
// `partly` says a message is partly received meanwhile (striped chunks on their way).
class LosingChannel final : public AnsweringChannel {
 public:
  explicit LosingChannel(bool partly) : partly_(partly) {}
  std::string endpoint() const override { return "inproc://losing"; }
  bool send(wire::Envelope&& message) override {
    const auto h = wire::decode_header(message.frames.front());
    if (!std::holds_alternative<wire::Heartbeat>(h.body)) {
      answered_.push_back(h.request_id);  // and lost
      return true;
    }
    answer(h.request_id, wire::HeartbeatReply{answered_});
    return true;
  }
  bool receiving() override { return partly_; }

 private:
  bool partly_;
  std::vector<uint64_t> answered_;
};

}  // namespace

TEST_CASE(
    "a reply the server says it sent and that never came ends the wait with ServerLost after two "
    "probes, unless some of it is on its way") {
  worker::ReplyWait how;
  how.probe = 50ms;
  {
    wire::Client client(std::make_unique<LosingChannel>(false));
    const auto id = client.send(wire::PullRequest{});
    REQUIRE(id.has_value());
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH_AS(worker::collect(client, "b", {*id}, 60s, "pull (rejoined)", how),
                         doctest::Contains("no reply came: lost on the way"), worker::ServerLost);
    CHECK(std::chrono::steady_clock::now() - t0 < 10s);  // two probes: 0.1 s, not the 60 s
  }
  {
    // Part of a message has come: the reply is on its way; the wait runs to its timeout.
    wire::Client client(std::make_unique<LosingChannel>(true));
    const auto id = client.send(wire::PullRequest{});
    REQUIRE(id.has_value());
    CHECK_THROWS_AS(worker::collect(client, "b", {*id}, 300ms, "pull (rejoined)", how),
                    SystemError);
  }
}
