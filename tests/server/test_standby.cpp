// Standby shards (server/standby.hpp, docs/server.md "Standby shards"): a primary and the standby
// of its shards in one process over inproc://, a region's client talking to either. The standby's
// clock is manual (the test decides when its primary has been silent long enough); the primary's
// is real.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/error.hpp"
#include "server/standby.hpp"
#include "tests/free_port.hpp"
#include "tests/server/server_fixture.hpp"

namespace geotrain::test {
namespace {

std::string standby_yaml(const std::string& tag, const std::string& codec = "fp32",
                         const std::string& a = "") {
  return fmt::format(R"(  standby:
    endpoints: {{a: "{3}", b: "inproc://standby-b-{0}", c: "inproc://standby-c-{0}"}}
    takeover_after_ms: 500
    codec: {2}
{1})",
                     tag, kOnlyRegistered, codec, a.empty() ? "inproc://standby-a-" + tag : a);
}

// The primary of region a (real clock) and its standby (manual clock), one context.
class StandbyPair {
 public:
  // `tcp`: the standby listens on loopback TCP (a connection that comes back when the standby
  // does, as between two server processes; inproc does not reconnect).
  explicit StandbyPair(const std::filesystem::path& dir, const std::string& codec = "fp32",
                       bool tcp = false)
      : tag_(std::to_string(reinterpret_cast<uintptr_t>(this))),
        standby_at_(tcp ? fmt::format("tcp://127.0.0.1:{}", free_port())
                        : "inproc://standby-a-" + tag_),
        config_(small_config(dir, 1, standby_yaml(tag_, codec, standby_at_))) {
    start_standby();
    start_primary();
  }
  ~StandbyPair() {
    stop_primary();
    stop_standby();
  }

  void start_standby() {
    server::ServerOptions s;
    s.standby = true;
    s.clock = standby_clock_.clock();
    s.poll = 5ms;
    s.write_metrics = false;
    // Started again on the same address: the old socket's close (ZeroMQ's reaper thread) may
    // not have released it yet.
    for (int tries = 0; !standby_; ++tries) {
      try {
        standby_ = std::make_unique<server::ParamServer>(config_, 0, context_, s);
      } catch (const std::exception& e) {
        if (tries >= 100) throw;
        std::this_thread::sleep_for(20ms);
      }
    }
    standby_thread_ = std::jthread([this](std::stop_token st) { standby_->run(st); });
  }
  // The standby's process is lost: a new one starts with nothing.
  void stop_standby() {
    standby_thread_.request_stop();
    standby_thread_.join();
    standby_.reset();
  }

  void start_primary() {
    server::ServerOptions p;
    // A name of its own each start: an inproc name is free again only once ZeroMQ's reaper has
    // closed the old socket.
    primary_at_ = fmt::format("inproc://primary-a-{}-{}", tag_, ++starts_);
    p.endpoint = primary_at_;
    p.poll = 5ms;
    p.write_metrics = false;
    primary_ = std::make_unique<server::ParamServer>(config_, 0, context_, p);
    primary_thread_ = std::jthread([this](std::stop_token st) { primary_->run(st); });
  }
  // The primary's loop stops (as if killed or stopped): it sends nothing more.
  server::ParamServer& pause_primary() {
    primary_thread_.request_stop();
    primary_thread_.join();
    return *primary_;
  }
  void stop_primary() {
    if (primary_thread_.joinable()) pause_primary();
    primary_.reset();
  }

  wire::Client primary_client() { return client(primary_at_); }
  wire::Client standby_client() { return client(standby_at_); }
  ManualClock& standby_clock() { return standby_clock_; }
  const server::ServerConfig& config() const { return config_; }
  const server::ParamServer& standby() const { return *standby_; }
  uint64_t hash() const { return standby_->table_hash(); }

 private:
  wire::Client client(const std::string& endpoint) {
    return wire::Client(wire::connect_dealer(context_, endpoint));
  }
  std::string tag_;
  std::string standby_at_;
  std::string primary_at_;
  int starts_ = 0;
  server::ServerConfig config_;
  wire::Context context_;
  ManualClock standby_clock_;
  std::unique_ptr<server::ParamServer> standby_;
  std::unique_ptr<server::ParamServer> primary_;
  std::jthread standby_thread_, primary_thread_;
};

wire::Error error_of(const wire::Reply& r) {
  REQUIRE(std::holds_alternative<wire::Error>(r.header.body));
  return std::get<wire::Error>(r.header.body);
}

wire::Reply say_hello(wire::Client& c, uint64_t hash) {
  return expect_reply(c, wire::Hello{"a", wire::kProtocolVersion, hash, {}});
}

// Until the standby holds a replica: its refusal of a hello says so while it has none.
void wait_for_replica(StandbyPair& pair) {
  auto probe = pair.standby_client();
  for (int i = 0; i < 400; ++i) {
    const auto e = error_of(say_hello(probe, pair.hash()));
    REQUIRE(e.code == wire::ErrorCode::not_serving);
    if (e.message.find("no replica") == std::string::npos) return;
    std::this_thread::sleep_for(5ms);
  }
  FAIL("the standby got no replica within 2 s");
}

}  // namespace

TEST_CASE("standby: follows its primary, takes over when it is silent, hands the shards back") {
  TempDir dir("standby");
  StandbyPair pair(dir.path());
  auto leader = pair.primary_client();
  hello(leader, "a", pair.hash());
  push(leader, 1, filled(kShard, 0.25f));
  const auto primary_values = pull(leader, true);
  CHECK(primary_values.header.round == 1);
  wait_for_replica(pair);

  // While the primary is heard from, the standby refuses the leaders, naming why.
  auto at_standby = pair.standby_client();
  auto refused = error_of(say_hello(at_standby, pair.hash()));
  CHECK(refused.code == wire::ErrorCode::not_serving);
  CHECK(refused.message.find("heard from their primary") != std::string::npos);

  // The primary stops; after takeover_after of its silence, a leader's hello is served, and the
  // shard's values and version are the primary's, bit for bit.
  auto& stopped = pair.pause_primary();
  pair.standby_clock().set(400);
  CHECK(error_of(say_hello(at_standby, pair.hash())).code == wire::ErrorCode::not_serving);
  pair.standby_clock().set(600);
  const auto taken = hello(at_standby, "a", pair.hash());
  REQUIRE(taken.shards.size() == 1);
  CHECK(taken.next_round == 2);
  const auto served = pull(at_standby, true);
  CHECK(served.header.version == primary_values.header.version);
  CHECK(served.values == primary_values.values);
  // Training goes on there: round 2.
  push(at_standby, 2, filled(kShard, 0.5f));
  const auto after = pull(at_standby, true);
  CHECK(after.header.round == 2);
  CHECK(after.values != served.values);

  // The old primary, back, learns that it was replaced at its next heartbeat to the standby.
  bool replaced = false;
  for (int i = 0; i < 300 && !replaced; ++i) {
    try {
      stopped.step(10ms);
    } catch (const server::Replaced& e) {
      replaced = true;
      CHECK(std::string(e.what()).find("serves its shards now") != std::string::npos);
    }
  }
  CHECK(replaced);

  // Restarted, the primary takes its shards back (round 2, newer than any checkpoint: it has
  // none), and the standby stops serving: its leader is unregistered there, and a hello is refused.
  pair.stop_primary();
  pair.start_primary();
  auto back = pair.primary_client();
  const auto rejoined = hello(back, "a", pair.hash());
  CHECK(rejoined.next_round == 3);
  const auto restored = pull(back, true);
  CHECK(restored.header.round == 2);
  CHECK(restored.header.version == after.header.version);
  CHECK(restored.values == after.values);
  auto r = expect_reply(at_standby, wire::PullRequest{0, 0, true, 0});
  CHECK(error_of(r).code == wire::ErrorCode::unregistered);
  // Long after the hand-back, but the primary heartbeats again (every heartbeat_ms, 100 ms).
  pair.standby_clock().set(10'000);
  std::this_thread::sleep_for(300ms);
  pair.standby_clock().set(10'100);
  CHECK(error_of(say_hello(at_standby, pair.hash())).code == wire::ErrorCode::not_serving);
}

TEST_CASE("standby: a lost standby starts again empty, and its primary sends it the values") {
  TempDir dir("standby");
  StandbyPair pair(dir.path(), "onebit", /*tcp=*/true);
  auto leader = pair.primary_client();
  hello(leader, "a", pair.hash());
  push(leader, 1, filled(kShard, 0.25f));
  wait_for_replica(pair);
  push(leader, 2, filled(kShard, 0.5f));  // a change, through onebit
  // The standby is lost and starts again with no replica: the primary's next change has no base
  // there and is refused; the primary sends the values at the next release, and the primary,
  // meanwhile, serves on undisturbed.
  pair.stop_standby();
  pair.start_standby();
  push(leader, 3, filled(kShard, 0.125f));
  push(leader, 4, filled(kShard, 0.0625f));
  const auto now = pull(leader, true);
  CHECK(now.header.round == 4);
  wait_for_replica(pair);
  // Taken over now, it serves the primary's values: exact after an anchor, else within onebit's
  // error feedback of them (the last change went through onebit).
  pair.pause_primary();
  pair.standby_clock().set(1000);
  auto at_standby = pair.standby_client();
  hello(at_standby, "a", pair.hash());
  const auto served = pull(at_standby, true);
  CHECK(served.header.round >= 3);
  float gap = 0;
  for (size_t i = 0; i < kShard; ++i)
    gap = std::max(gap, std::abs(served.values[i] - now.values[i]));
  CHECK(gap < 0.5f);
}

TEST_CASE("standby: a standby with no replica never serves; bad replicas are refused whole") {
  TempDir dir("standby");
  auto config = small_config(dir.path(), 1, standby_yaml("alone"));
  wire::Context context;
  server::ServerOptions s;
  s.standby = true;
  ManualClock clock;
  s.clock = clock.clock();
  s.poll = 5ms;
  s.write_metrics = false;
  server::ParamServer standby(config, 0, context, s);
  std::jthread loop([&](std::stop_token st) { standby.run(st); });
  auto c = wire::Client(wire::connect_dealer(context, "inproc://standby-a-alone"));
  clock.set(60'000);
  auto e = error_of(say_hello(c, standby.table_hash()));
  CHECK(e.code == wire::ErrorCode::not_serving);
  CHECK(e.message.find("holds no replica") != std::string::npos);

  const auto replica = [](uint32_t id, bool momentum) {
    wire::Replica m;
    m.shards.push_back({id, 3, 1, momentum});
    return m;
  };
  const auto values_frame = [](std::vector<float> v) {
    std::vector<wire::Frame> f;
    f.emplace_back(v.data(), v.size() * sizeof(float));
    return f;
  };
  CHECK(error_of(expect_reply(c, replica(0, false), values_frame(filled(kShard - 1, 1.0f)))).code ==
        wire::ErrorCode::malformed);
  CHECK(error_of(expect_reply(c, replica(7, false), values_frame(filled(kShard, 1.0f)))).code ==
        wire::ErrorCode::bad_shard);
  CHECK(error_of(expect_reply(c, replica(0, true), values_frame(filled(kShard, 1.0f)))).code ==
        wire::ErrorCode::malformed);  // momentum said, its frame missing
  auto nan = filled(kShard, 1.0f);
  nan[5] = std::numeric_limits<float>::quiet_NaN();
  const auto bad = error_of(expect_reply(c, replica(0, false), values_frame(nan)));
  CHECK(bad.code == wire::ErrorCode::bad_payload);
  CHECK(bad.message.find("NaN") != std::string::npos);
  // None of them counted: still no replica.
  CHECK(error_of(say_hello(c, standby.table_hash())).message.find("holds no replica") !=
        std::string::npos);
  // A good one: after it, the standby serves once its primary is silent (the clock moves on).
  CHECK(std::holds_alternative<wire::Ack>(
      expect_reply(c, replica(0, false), values_frame(filled(kShard, 1.5f))).header.body));
  clock.set(61'000);
  hello(c, "a", standby.table_hash());
  const auto p = pull(c, true);
  CHECK(p.header.version == 3);
  CHECK(p.values == filled(kShard, 1.5f));
  // Serving, it answers replicas with `replaced`.
  CHECK(error_of(expect_reply(c, wire::Replica{})).code == wire::ErrorCode::replaced);
}

TEST_CASE("standby: lossy replicas carry changes with error feedback, anchored by the values") {
  constexpr size_t n = 4096;
  server::ShardSettings settings;
  settings.optimizer.momentum = 0.9f;  // momentum travels too
  const auto make = [&] {
    return server::Shard({0, 0, n, 0}, std::vector<uint8_t>(n, 0), 2, settings);
  };
  std::vector<server::Shard> primary, standby, fresh;
  primary.push_back(make());
  standby.push_back(make());
  fresh.push_back(make());
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(n), momentum(n);
  const auto move_on = [&](uint64_t version) {
    for (size_t i = 0; i < n; ++i) {
      values[i] += 0.01f * normal(rng);
      momentum[i] = 0.5f * momentum[i] + 0.01f * normal(rng);
    }
    primary[0].restore(version, version, values, momentum);
  };
  const auto max_gap = [&] {
    float gap = 0.0f;
    for (size_t i = 0; i < n; ++i)
      gap = std::max(gap, std::abs(standby[0].values()[i] - primary[0].values()[i]));
    return gap;
  };
  const auto apply = [&](server::ReplicaMessage& m, std::vector<server::Shard>& to) {
    return server::restore_from_replica(to, m.replica, m.frames, 1);
  };
  const auto bytes_of = [](const server::ReplicaMessage& m) {
    size_t b = 0;
    for (const auto& f : m.frames) b += f.size();
    return b;
  };
  server::ReplicaEncoder encoder("onebit", 4);
  move_on(1);
  auto first = encoder.next(primary, true);
  CHECK_FALSE(first.replica.shards[0].change);  // the first replica is the values
  CHECK(apply(first, standby) == 1);
  CHECK(max_gap() == 0.0f);
  const float step_scale = 0.05f;  // about five steps of 0.01
  for (uint64_t v = 2; v <= 4; ++v) {
    move_on(v);
    auto m = encoder.next(primary, true);
    REQUIRE(m.replica.shards[0].change);
    CHECK(m.replica.shards[0].base_version == v - 1);
    CHECK(bytes_of(m) < n * sizeof(float) / 8);  // two one-bit payloads, not 2 x fp32
    apply(m, standby);
    CHECK(standby[0].version() == v);
    CHECK(max_gap() > 0.0f);
    CHECK(max_gap() < step_scale);
    // A change is refused by a standby that lacks its base, which then restores nothing.
    auto again = encoder.next(primary, true);  // (a further replica of the same values)
    if (again.replica.shards[0].change) {
      CHECK_THROWS_WITH_AS(apply(again, fresh), doctest::Contains("send the values"), InputError);
      CHECK(fresh[0].version() == 0);
      apply(again, standby);
    }
  }
  // Every anchor_every-th replica, and after anchor_next(), the values again: exact.
  move_on(5);
  encoder.anchor_next();
  auto anchored = encoder.next(primary, true);
  CHECK_FALSE(anchored.replica.shards[0].change);
  apply(anchored, standby);
  CHECK(max_gap() == 0.0f);
  CHECK(std::equal(standby[0].momentum().begin(), standby[0].momentum().end(),
                   primary[0].momentum().begin()));
  // Unchanged values sent again and again: error feedback brings the copy to them.
  move_on(6);
  auto m = encoder.next(primary, true);
  apply(m, standby);
  const float after_one = max_gap();
  m = encoder.next(primary, true);
  apply(m, standby);
  CHECK(max_gap() <= after_one);
  // A corrupt change payload is refused whole.
  move_on(7);
  auto bad = encoder.next(primary, true);
  REQUIRE(bad.replica.shards[0].change);
  std::vector<wire::Frame> cut;
  cut.emplace_back(bad.frames[0].data(), bad.frames[0].size() - 3);
  cut.emplace_back(bad.frames[1].data(), bad.frames[1].size());
  const auto before = standby[0].version();
  CHECK_THROWS_WITH_AS(server::restore_from_replica(standby, bad.replica, cut, 1),
                       doctest::Contains("values change"), InputError);
  CHECK(standby[0].version() == before);
}

TEST_CASE("standby: a primary refuses replicas and take-backs") {
  TempDir dir("standby");
  Cluster cluster(small_config(dir.path(), 1, kOnlyRegistered));
  auto c = cluster.client();
  const auto e1 = error_of(expect_reply(c, wire::Replica{}));
  CHECK(e1.code == wire::ErrorCode::malformed);
  CHECK(e1.message.find("only a standby keeps replicas") != std::string::npos);
  CHECK(error_of(expect_reply(c, wire::TakeBack{})).code == wire::ErrorCode::malformed);
}

TEST_CASE("standby: server.standby is read and checked") {
  TempDir dir("standby");
  const auto on = small_config(dir.path(), 1, "  standby: on");
  CHECK(on.standby.on);
  CHECK(on.standby.endpoints.empty());
  CHECK(on.standby.takeover_after == std::chrono::milliseconds(2000));
  CHECK_FALSE(small_config(dir.path(), 1, "  standby: off").standby.on);
  CHECK_FALSE(small_config(dir.path(), 1).standby.on);
  const auto full = small_config(dir.path(), 1, standby_yaml("x"));
  CHECK(full.standby.endpoints.at("b") == "inproc://standby-b-x");
  CHECK(full.standby.takeover_after == std::chrono::milliseconds(500));
  CHECK_THROWS_WITH_AS(small_config(dir.path(), 1, "  standby: maybe"),
                       doctest::Contains("server.standby is 'maybe', allowed: on, off"),
                       InputError);
  CHECK_THROWS_WITH_AS(small_config(dir.path(), 1, "  standby: {every: 2}"),
                       doctest::Contains("every"), InputError);
  CHECK_THROWS_WITH_AS(small_config(dir.path(), 1, "  standby: {takeover_after_ms: 50}"),
                       doctest::Contains("must exceed server.heartbeat_ms"), InputError);
  CHECK_THROWS_WITH_AS(small_config(dir.path(), 1, "  standby: {endpoints: {a: nowhere}}"),
                       doctest::Contains("server.standby.endpoints.a"), InputError);
  CHECK_THROWS_WITH_AS(server::parse_server_config(R"(
regions: [solo]
model: {tensors: [{name: w, size: 8}]}
server: {standby: on}
)"),
                       doctest::Contains("needs two regions or more"), InputError);
  // A primary needs its standby's endpoint.
  wire::Context context;
  server::ServerOptions p;
  p.endpoint = "inproc://needs-standby";
  p.write_metrics = false;
  CHECK_THROWS_WITH_AS(server::ParamServer(on, 0, context, p),
                       doctest::Contains("server.standby.endpoints has no entry for region 'a'"),
                       InputError);
}

}  // namespace geotrain::test
