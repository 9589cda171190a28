// Rounds a region sits out (docs/protocol.md, "Sitting out rounds"): a region's shards deferred
// past rounds keep one offset on every server; a region further behind a server's frontier than
// the staleness bound sits out the rounds up to it; a deferred shard not pushed in an exchange is
// sat out at its server at once (wire::Push::absent), so that the other regions' round there
// does not wait for it, and so is one pulled in full after its server declared the region dead;
// a leader started again between its fragments' pushes sits out the round on the fragments its
// predecessor had not pushed; an exchange does not wait on a server silent since an earlier
// exchange deferred a push there, nor on a round its server holds for a region silent there.
// Two regions, two ParamServers over loopback TCP (two_servers.hpp), one link through netsim.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <future>
#include <thread>

#include "compression/factory.hpp"
#include "netsim/proxy.hpp"
#include "server/param_server.hpp"
#include "tests/worker/two_servers.hpp"
#include "wire/channel.hpp"
#include "wire/client.hpp"
#include "worker/leader/region_sync.hpp"

using namespace geotrain;
using namespace geotrain::test;
using namespace std::chrono_literals;

namespace {

// Region a as a scripted client of both servers: its hellos, its pushes (a whole-shard fp32 step
// of `value`), and the replies it waits for.
struct ScriptedRegion {
  ScriptedRegion(TwoServers& two, const ParamTable& table, wire::Context& context) {
    for (uint32_t s = 0; s < 2; ++s) {
      clients.push_back(std::make_unique<wire::Client>(
          wire::connect_dealer(context, two.servers[s].server->endpoint())));
      auto hello = clients[s]->call(
          wire::Hello{"a", wire::kProtocolVersion, table.layout_hash(), {}}, {}, 20s);
      REQUIRE(hello);
      shards.push_back(std::get<wire::HelloReply>(hello->header.body).shards.at(0));
    }
  }
  // Its push of `round` on server s (with `skip`, sitting out the rounds before it); the id.
  uint64_t push(uint32_t s, uint64_t round, float value, bool skip = false) {
    Bytes payload;
    compression::make_codec("fp32")->encode(std::vector<float>(shards[s].count, value), payload);
    const uint64_t bytes = payload.size();
    std::vector<wire::Frame> frames;
    frames.push_back(wire::frame_from_bytes(std::move(payload)));
    auto id = clients[s]->send(wire::Push{shards[s].id, round, 0, {{0, bytes}}, 0, false, skip},
                               std::move(frames));
    REQUIRE(id);
    return *id;
  }
  // The next reply from server s, within `wait`, which must answer request `id`.
  wire::Reply reply(uint32_t s, uint64_t id, std::chrono::milliseconds wait = 5s) {
    auto reply = clients[s]->receive(wait);
    REQUIRE_MESSAGE(reply, "server ", s, ": no reply to a's request within ", wait.count(), " ms");
    CHECK(reply->header.request_id == id);
    return std::move(*reply);
  }
  std::vector<std::unique_ptr<wire::Client>> clients;
  std::vector<wire::ShardInfo> shards;
};

}  // namespace

TEST_CASE(
    "every shard deferred, back a few rounds apart: the region's rounds keep one offset on every "
    "server") {
  // Both servers stop (every shard of both regions deferred, as when the servers hold their rounds
  // for a region that is away); a's server resumes, and b's three rounds later. Each shard sits
  // out the rounds it was deferred for, so that both servers count every round of each region.
  // (Mapped one by one, b's server would count three fewer, and under staleness bound 0 every
  // round would then wait for two exchanges; re-derived from the first shard back, the regions'
  // rounds could pair differently from before, a region a second ahead of another.)
  TwoServers two("defer-all");
  constexpr int kRounds = 30;
  DeferringLeaders fleet{two, kRounds};
  fleet.run([&] {
    fleet.wait_for_round(4);
    fleet.stop(0);
    fleet.stop(1);
    std::this_thread::sleep_for(400ms);
    const int back = std::max(fleet.rounds_done[0].load(), fleet.rounds_done[1].load());
    fleet.resume(0);
    fleet.wait_for_round(back + 3);
    fleet.resume(1);
  });
  for (int r = 0; r < 2; ++r) {
    INFO("region " << two.config.regions[r] << ": " << fleet.errors[r]);
    REQUIRE(fleet.errors[r].empty());
    CHECK(fleet.deferring[r] >= 5);
    CHECK(fleet.late[r] >= 2);
  }
  const auto on_a = clocks_of(two, 0), on_b = clocks_of(two, 1);
  CHECK(on_a == on_b);
  // Every region's rounds are the servers' (its shift stayed 0): its last round is kRounds there.
  for (auto clock : on_a) CHECK(clock == static_cast<uint64_t>(kRounds));
  CHECK(fleet.final_base[0] == fleet.final_base[1]);
}

TEST_CASE(
    "a region further behind a server's frontier than the staleness bound sits out the rounds up "
    "to it, on every server") {
  // Region a (a scripted client) sits out rounds 1 to 9 at both servers and pushes round 10, which
  // waits at the gate for b (staleness bound 0). Region b's leader pushes round 1, and its pull
  // says the servers' frontier is 9: its next exchange sits out rounds 2 to 8 and pushes 9 on
  // both servers, which lets a's round 10 in; its third exchange is round 10 with a. (Pushing one
  // round per exchange, b would hold a back for eight exchanges.)
  TwoServers two("frontier");
  const ParamTable table(two.config.tensors, two.config.critical);
  wire::Context context;
  ScriptedRegion a(two, table, context);
  std::vector<uint64_t> waiting;
  for (uint32_t s = 0; s < 2; ++s) waiting.push_back(a.push(s, 10, 0.0f, /*skip=*/true));
  const auto b_config = leader_config(two.config, 1, two.servers[0].server->endpoint(),
                                      two.servers[1].server->endpoint());
  worker::RegionSync b(table, b_config, context);
  REQUIRE(b.connect() == 1);
  std::vector<float> local(b.base().begin(), b.base().end());
  b.exchange(local);  // round 1: a sat it out
  for (uint32_t s = 0; s < 2; ++s)
    CHECK(a.clients[s]->receive(100ms) == std::nullopt);  // still waiting
  b.exchange(local);  // sits out 2 to 8, pushes 9: a's round 10 goes in
  for (uint32_t s = 0; s < 2; ++s)
    CHECK(std::get<wire::PushReply>(a.reply(s, waiting[s], 20s).header.body).round == 10);
  b.exchange(local);  // round 10, with a
  // b's leader started again at its own round 4 (its count, 7 behind the servers'): beside
  // members that hold the region's state for round 4 it goes on from there (ResumeRound::exactly),
  // mapped onto the servers' 11; from a snapshot it goes on from the servers' count.
  CHECK(worker::RegionSync(table, b_config, context).connect(4, worker::ResumeRound::exactly) == 4);
  CHECK(worker::RegionSync(table, b_config, context).connect(4) == 11);
  const auto on_a = clocks_of(two, 0), on_b = clocks_of(two, 1);
  CHECK(on_a == std::vector<uint64_t>{10, 10});
  CHECK(on_b == std::vector<uint64_t>{10, 10});
}

TEST_CASE(
    "a deferred shard not pushed in an exchange is sat out at its server at once: the other "
    "regions' round there does not wait for its next push") {
  // Region a is a scripted client; region b a leader with shard_wait. b's round 2 is deferred on
  // both servers (a has not pushed it); b's next exchange pushes neither shard and says it sits
  // out round 3 there (wire::Push::absent). a then pushes rounds 2 and 3: both are released
  // without b doing anything more (before, round 3 waited for b's next push, an exchange later,
  // and a's exchange waited out shard_wait: the deferral went back and forth between regions).
  TwoServers two("absent");
  const ParamTable table(two.config.tensors, two.config.critical);
  wire::Context context;
  ScriptedRegion a(two, table, context);
  worker::RegionSync b(table, two.deferring_leader(1), context);
  REQUIRE(b.connect() == 1);
  std::vector<float> local(b.base().begin(), b.base().end());
  for (uint32_t s = 0; s < 2; ++s) a.reply(s, a.push(s, 1, 0.01f));
  CHECK(b.exchange(local, std::nullopt, /*defer=*/true).deferred.empty());  // round 1, with a
  CHECK(b.exchange(local, std::nullopt, true).deferred.size() == 2);        // round 2: a is late
  CHECK(b.take_ready(0).empty());
  CHECK(b.exchange(local, std::nullopt, true).deferred.size() == 2);  // round 3: pushes nothing
  for (uint32_t s = 0; s < 2; ++s) {
    a.reply(s, a.push(s, 2, 0.01f));
    a.reply(s, a.push(s, 3, 0.01f));
    const auto pulled =
        a.reply(s, *a.clients[s]->send(wire::PullRequest{a.shards[s].id, 0, true, 3}));
    CHECK(std::get<wire::PullReply>(pulled.header.body).round == 3);
  }
  // b merges round 2 and pushes round 4 (skipping to it) with a: no shard deferred.
  std::vector<uint64_t> a4;
  for (uint32_t s = 0; s < 2; ++s) a4.push_back(a.push(s, 4, 0.01f));
  for (int polls = 0; b.deferred_shards() > 0 && polls < 1000; ++polls) {
    b.take_ready(0);
    std::this_thread::sleep_for(5ms);
  }
  REQUIRE(b.deferred_shards() == 0);
  CHECK(b.exchange(local, std::nullopt, true).deferred.empty());
  for (uint32_t s = 0; s < 2; ++s) a.reply(s, a4[s]);
  for (uint32_t s = 0; s < 2; ++s) {
    auto reply = a.clients[s]->call(wire::StatsRequest{}, {}, 5s);
    REQUIRE(reply);
    const auto stats = nlohmann::json::parse(std::get<wire::StatsReply>(reply->header.body).json);
    CHECK(stats["regions"]["b"]["rounds_sat_out"] == 1);
    CHECK(clocks_of(two, s) == std::vector<uint64_t>{4, 4});
  }
}

TEST_CASE(
    "a leader started again between its fragments' pushes maps every fragment's rounds alike: the "
    "fragments it had not pushed sit out the round") {
  // Two fragments, each a shard per server. Region a's leader exchanges round 1 of both fragments
  // with b, and round 2 of fragment 0, and stops; its successor goes on from round 2 (beside
  // members that hold it). The servers expect a's round 3 of fragment 0 and round 2 of fragment 1.
  // Mapped as each server expects, the successor's round 2 would be the servers' round 3 of
  // fragment 0 and round 2 of fragment 1: early on one fragment, late on the other, which no
  // waiting puts back in step (the LM demo under chaos). Mapped alike, both are the servers'
  // round 3, fragment 1 sitting out round 2: b's round 2 of fragment 1 is released without a,
  // and b's round 3 of both fragments with a's round 2. (Mapped as the servers expect, b's round
  // 3 of fragment 1 waits for a push of a's that never comes, and b's exchange times out.)
  TwoServers two("one-shift", 2);
  const ParamTable table(two.config.tensors, two.config.critical);
  const size_t n = table.total_elements();
  auto b_config = leader_config(two.config, 1, two.servers[0].server->endpoint(),
                                two.servers[1].server->endpoint());
  b_config.timeout = 3s;
  wire::Context b_context;
  worker::RegionSync b(table, b_config, b_context);
  const std::vector<float> la(n, 0.01f), lb(n, 0.02f);
  // a's leader (on this thread) and b's (on its own) at once.
  const auto together = [](const std::function<void()>& a_part,
                           const std::function<void()>& b_part) {
    auto b_done = std::async(std::launch::async, b_part);
    a_part();
    b_done.get();
  };
  {
    wire::Context a_context;
    worker::RegionSync a(table, two.deferring_leader(0), a_context);
    REQUIRE(a.connect() == 1);
    REQUIRE(b.connect() == 1);
    REQUIRE(a.config().fragments == 2);
    const auto rounds = [](worker::RegionSync& sync, const std::vector<float>& local) {
      for (uint32_t fragment : {0, 1, 0}) sync.exchange(local, fragment);
    };
    together([&] { rounds(a, la); }, [&] { rounds(b, lb); });
  }  // a's leader stops between its fragments' pushes of round 2
  wire::Context a_context;
  worker::RegionSync a(table, two.deferring_leader(0), a_context);
  REQUIRE(a.connect(2, worker::ResumeRound::exactly) == 2);
  std::vector<ElementRange> deferred;
  together(
      [&] {
        // Fragment 1 first: the servers' round 3 needs b's, which comes after b's round 3 of
        // fragment 0: deferred. Then fragment 0, the servers' round 3 with b's.
        deferred = a.exchange(la, 1, /*defer=*/true).deferred;
        CHECK(a.exchange(la, 0, true).deferred.empty());
      },
      [&] {
        for (uint32_t fragment : {1, 0, 1}) b.exchange(lb, fragment);
      });
  const auto fragment_1 = a.fragment_ranges(1);
  CHECK(deferred.size() == 2);
  for (const auto& r : deferred)
    CHECK(std::find(fragment_1.begin(), fragment_1.end(), r) != fragment_1.end());
  CHECK(a.settle().size() == 2);
  for (uint32_t s = 0; s < 2; ++s) {
    CAPTURE(s);
    if (two.servers[s].thread.joinable()) two.stop_loop(s);
    for (const auto& shard : two.servers[s].server->shards())
      CHECK(shard.gate().clocks() == std::vector<uint64_t>{3, 3});  // a's, b's
  }
}

TEST_CASE(
    "an exchange does not wait on a server silent since an earlier exchange deferred a push "
    "there, nor on a round held for a region silent at its server; a server that holds a round "
    "for a region that is late is waited for") {
  // Two fragments, each a shard per server; round 1 with both regions, then round 2 with a
  // shard wait of 2 s, deferring.
  TwoServers two("silent", 2);
  const ParamTable table(two.config.tensors, two.config.critical);
  const size_t n = table.total_elements();
  auto a_config = two.deferring_leader(0), b_config = two.deferring_leader(1);
  a_config.shard_wait = b_config.shard_wait = 2s;
  wire::Context a_context, b_context;
  worker::RegionSync a(table, a_config, a_context);
  worker::RegionSync b(table, b_config, b_context);
  REQUIRE(a.connect() == 1);
  REQUIRE(b.connect() == 1);
  const std::vector<float> la(n, 0.01f), lb(n, 0.02f);
  auto b_round_1 = std::async(std::launch::async, [&] {
    for (uint32_t fragment : {0, 1}) b.exchange(lb, fragment);
  });
  for (uint32_t fragment : {0, 1}) a.exchange(la, fragment);
  b_round_1.get();
  std::vector<worker::RoundReport> reports;

  SUBCASE("a stopped server: one shard wait, then only a look at it") {
    // Server 0 stops (as under SIGSTOP) and answers nothing. Each region's round 2 of fragment
    // 0 waits there for its shard wait and defers; fragment 1's only looks at server 0, and
    // takes its shard on server 1 with the other region's. (Waiting, it would take the shard
    // wait again.)
    two.stop_loop(0);
    auto b_round_2 = std::async(std::launch::async, [&] {
      for (uint32_t fragment : {0, 1}) b.exchange(lb, fragment, /*defer=*/true);
    });
    for (uint32_t fragment : {0, 1}) reports.push_back(a.exchange(la, fragment, true));
    b_round_2.get();
    for (const auto& r : reports) CHECK(r.deferred.size() == 1);  // its shard on server 0
    CHECK(reports[0].push_seconds >= 1.9);
    CHECK(reports[1].push_seconds < 1.0);
    auto* raw = two.servers[0].server.get();
    two.servers[0].thread = std::jthread([raw](std::stop_token st) { raw->run(st); });
  }
  SUBCASE("a server that answers, holding back a round for a region that is late: waited for") {
    // Region b pushes its round 2 only after region a's exchanges, its leader alive meanwhile
    // (its heartbeats reach both servers). Both servers take a's pushes and hold a's round 2 of
    // fragment 0 for b: a's fragment 1 waits its shard wait there too (a region merely late may
    // come within it: not waiting, the regions would stay out of step).
    std::jthread b_alive([&](std::stop_token stop) {
      while (!stop.stop_requested()) {
        b.keep_alive();
        std::this_thread::sleep_for(50ms);
      }
    });
    for (uint32_t fragment : {0, 1}) reports.push_back(a.exchange(la, fragment, true));
    b_alive.request_stop();
    b_alive.join();
    for (const auto& r : reports) {
      CHECK(r.deferred.size() == 2);
      CHECK(r.push_seconds >= 1.9);
      CHECK(r.held_for_silent == 0);
    }
    for (uint32_t fragment : {0, 1}) b.exchange(lb, fragment, true);  // releases a's
  }
  SUBCASE(
      "a server that answers, holding back a round for a region silent there: one shard "
      "wait, then only a look") {
    // Region b sends nothing at all (cut off from both servers, or its leader dead): a's
    // fragment 0 waits its shard wait (b was heard from a moment ago); by fragment 1's
    // exchange both servers have not heard from b for more than two heartbeats (400 ms), say
    // so in their answers to a's pushes, and a defers there without waiting.
    for (uint32_t fragment : {0, 1}) reports.push_back(a.exchange(la, fragment, true));
    for (const auto& r : reports) CHECK(r.deferred.size() == 2);
    CHECK(reports[0].push_seconds >= 1.9);
    CHECK(reports[0].held_for_silent == 0);
    CHECK(reports[1].push_seconds < 1.0);
    CHECK(reports[1].held_for_silent == 2);
    for (uint32_t fragment : {0, 1}) b.exchange(lb, fragment, true);  // releases a's
  }
  size_t deferred = 0;
  for (const auto& r : reports) deferred += r.deferred.size();
  CHECK(a.settle().size() == deferred);
  b.settle();
  CHECK(a.deferred_shards() == 0);
  CHECK(b.deferred_shards() == 0);
  for (uint32_t s = 0; s < 2; ++s) {
    CAPTURE(s);
    two.stop_loop(s);
    for (const auto& shard : two.servers[s].server->shards())
      CHECK(shard.gate().clocks() == std::vector<uint64_t>{2, 2});  // a's, b's
  }
}

TEST_CASE(
    "a shard pulled in full after its server declared the region dead sits out the round of that "
    "exchange at once: the other region's round there does not wait for its next push") {
  // After a partition's heal on the LM demo, each fragment's round on the cut server waited a
  // round (about 3 s) for the region's next push. Here region a reaches server a through a
  // netsim link partitioned from 1 s to 3 s after its start (server.dead_after_ms 800).
  // a's round 2 is deferred there, its push held; server a declares a dead and releases round 2
  // with b's push alone; at the heal the push arrives and is refused, a rejoins. a's round 3
  // pulls that shard in full, merges it and pushes it from round 4 on. b's round 3 there must
  // not wait for that push (b's shard wait is 2 s).
  TwoServers two("absent-after-resync", 1, 800ms);
  const auto target = two.servers[0].server->endpoint();
  const auto port = static_cast<uint16_t>(std::stoi(target.substr(target.rfind(':') + 1)));
  netsim::Fault cut;
  cut.at_s = 1.0;
  cut.until_s = 3.0;
  netsim::WanProxy link({netsim::LinkConfig{.from = "a",
                                            .to = "a-server",
                                            .listen = {"127.0.0.1", 0},
                                            .target = {"127.0.0.1", port},
                                            .properties = {},
                                            .faults = {cut}}},
                        netsim::ProxyOptions{});
  const ParamTable table(two.config.tensors, two.config.critical);
  const size_t n = table.total_elements();
  auto a_config = two.deferring_leader(0), b_config = two.deferring_leader(1);
  a_config.servers[0].endpoint = fmt::format("tcp://127.0.0.1:{}", link.listen_endpoint(0).port);
  b_config.shard_wait = 2s;
  wire::Context a_context, b_context;
  worker::RegionSync a(table, a_config, a_context);
  worker::RegionSync b(table, b_config, b_context);
  const auto t0 = std::chrono::steady_clock::now();
  link.start();
  REQUIRE(a.connect() == 1);
  REQUIRE(b.connect() == 1);
  const std::vector<float> la(n, 0.01f), lb(n, 0.02f);
  // A round of both leaders; a heartbeats while b's goes on, as its leader's thread would.
  const auto together = [&](uint64_t round) {
    auto b_done =
        std::async(std::launch::async, [&] { return b.exchange(lb, std::nullopt, true); });
    const auto a_report = a.exchange(la, std::nullopt, true);
    CAPTURE(round);
    REQUIRE(a.deferred_shards() == a_report.deferred.size());
    while (b_done.wait_for(20ms) != std::future_status::ready) a.keep_alive();
    return b_done.get();
  };
  const auto since_start = [&] { return std::chrono::steady_clock::now() - t0; };
  together(1);
  // Both heartbeat until shortly before the cut (a probe then is answered before it).
  while (since_start() < 800ms) {
    a.keep_alive();
    b.keep_alive();
    std::this_thread::sleep_for(50ms);
  }
  REQUIRE(since_start() < 950ms);
  std::this_thread::sleep_for(1100ms - since_start());
  CHECK(a.exchange(la, std::nullopt, true).deferred.size() == 2);  // b has not pushed round 2
  // b's round 2 waits (probing both servers) until server a declares a dead; meanwhile, and until
  // the heal, a merges its shard on server b and heartbeats there; the refusal of its held push
  // tells it server a lost it, and its keep-alive rejoins it. b heartbeats once its round is done.
  auto b_round_2 = std::async(std::launch::async, [&] { b.exchange(lb); });
  while (a.rejoins() == 0) {
    REQUIRE_MESSAGE(since_start() < 10s, "a never rejoined server a");
    a.take_ready(0);
    a.keep_alive();
    if (b_round_2.wait_for(0s) == std::future_status::ready) b.keep_alive();
    std::this_thread::sleep_for(50ms);
  }
  b_round_2.get();
  CHECK(b.rejoins() == 0);          // b was never declared dead
  CHECK(a.deferred_shards() == 1);  // its shard on server a, lost there

  const auto b_round_3 = together(3);
  CHECK(b_round_3.deferred.empty());
  CHECK(b_round_3.push_seconds < 1.0);  // waiting for a's round 4: its shard wait, 2 s
  CHECK(a.deferred_shards() == 0);
  together(4);
  for (uint32_t s = 0; s < 2; ++s) {
    CAPTURE(s);
    two.stop_loop(s);
    for (const auto& shard : two.servers[s].server->shards())
      CHECK(shard.gate().clocks() == std::vector<uint64_t>{4, 4});  // a's, b's
  }
  CHECK(std::equal(a.base().begin(), a.base().end(), b.base().begin()));
}
