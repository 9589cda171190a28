#include <doctest/doctest.h>

#include <fstream>

#include "server/checkpoint.hpp"
#include "server_fixture.hpp"

using namespace geotrain;
using namespace geotrain::test;
namespace fs = std::filesystem;

namespace {
server::CheckpointState sample_state(uint64_t round, uint64_t hash) {
  server::CheckpointState s{round, hash, {}};
  for (uint32_t id : {2u, 5u}) {
    server::ShardSnapshot snap{{id, id * 100ull, 100, 0}, round * 10 + id, round, {}, {}};
    std::mt19937 rng(static_cast<unsigned>(round * 7 + id));
    std::normal_distribution<float> d;
    for (int i = 0; i < 100; ++i) {
      snap.values.push_back(d(rng));
      snap.momentum.push_back(d(rng));
    }
    s.shards.push_back(std::move(snap));
  }
  return s;
}
std::vector<server::ShardRange> ranges_of(const server::CheckpointState& s) {
  std::vector<server::ShardRange> r;
  for (const auto& x : s.shards) r.push_back(x.range);
  return r;
}
}  // namespace

TEST_CASE("a checkpoint round-trips bit-exactly and only the newest N are kept") {
  TempDir tmp("ckpt");
  const auto& dir = tmp.path();
  server::CheckpointStore store(dir, 2);
  for (uint64_t round : {3u, 6u, 9u}) store.write(sample_state(round, 42));
  auto folders = store.list();
  REQUIRE(folders.size() == 2);
  CHECK(folders[0].filename() == "ckpt-000000000009");
  auto expected = sample_state(9, 42);
  auto loaded = store.restore_latest(42, ranges_of(expected));
  REQUIRE(loaded);
  CHECK(loaded->round == 9);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(loaded->shards[i].version == expected.shards[i].version);
    CHECK(std::memcmp(loaded->shards[i].values.data(), expected.shards[i].values.data(), 400) == 0);
    CHECK(std::memcmp(loaded->shards[i].momentum.data(), expected.shards[i].momentum.data(), 400) ==
          0);
  }
  CHECK(fs::exists(folders[0] / "manifest.json"));
}

TEST_CASE(
    "a corrupt or mismatched checkpoint is refused with the reason and the previous one restored") {
  TempDir tmp("corrupt");
  const auto& dir = tmp.path();
  server::CheckpointStore store(dir, 5);
  store.write(sample_state(4, 42));
  auto newest = store.write(sample_state(8, 42));
  auto ranges = ranges_of(sample_state(8, 42));
  {
    std::fstream f(newest / "shard-5.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  std::vector<std::string> skipped;
  auto loaded = store.restore_latest(42, ranges, &skipped);
  REQUIRE(loaded);
  CHECK(loaded->round == 4);
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0].find("checksum") != std::string::npos);

  CHECK_THROWS_WITH_AS(store.load(dir / "ckpt-000000000004", 43, ranges),
                       doctest::Contains("state hash"), InputError);
  auto wrong = ranges;
  wrong[1].count = 99;
  CHECK_THROWS_WITH_AS(store.load(dir / "ckpt-000000000004", 42, wrong),
                       doctest::Contains("does not match"), InputError);
  fs::remove(dir / "ckpt-000000000004" / "manifest.json");
  skipped.clear();
  CHECK_FALSE(store.restore_latest(42, ranges, &skipped));
  CHECK(skipped.size() == 2);
}

TEST_CASE(
    "a restarted server restores its shard, version and optimizer state from its checkpoint") {
  TempDir tmp("restart");
  const auto& dir = tmp.path();
  auto config = small_config(dir, 0,
                             std::string(kOnlyRegistered) +
                                 "\n  optimizer: {lr: 0.7, momentum: 0.9, nesterov: true}\n  "
                                 "checkpoint: {every: 2, keep: 2}");
  Pulled before;
  {
    Cluster cluster(config);
    auto a = cluster.client();
    hello(a, "a", cluster.table_hash());  // only a is live: its rounds release at once
    for (uint64_t t = 1; t <= 4; ++t) push(a, t, filled(kShard, 0.25f * static_cast<float>(t)));
    before = pull(a, true);
    CHECK(before.header.round == 4);
    // DiLoCo's Nesterov outer step on the critical part, by hand: m = 0.9m + g; theta -= 0.7(g +
    // 0.9m)
    float theta = 0, m = 0;
    for (int t = 1; t <= 4; ++t) {
      const float g = -0.25f * static_cast<float>(t);
      m = 0.9f * m + g;
      theta -= 0.7f * (g + 0.9f * m);
    }
    CHECK(before.values[0] == theta);
  }
  Cluster restarted(config);
  auto a = restarted.client();
  auto welcome = hello(a, "a", restarted.table_hash());
  CHECK(welcome.next_round == 5);
  auto after = pull(a, true);
  CHECK(after.header.version == before.header.version);
  CHECK(std::memcmp(after.values.data(), before.values.data(), kShard * sizeof(float)) == 0);
  // momentum restored too: the next step equals the one the first server would have made
  push(a, 5, filled(kShard, 0.0f));
  auto next = pull(a, false, after.header.version);
  float theta = 0, m = 0;
  for (int t = 1; t <= 5; ++t) {
    const float g = t <= 4 ? -0.25f * static_cast<float>(t) : 0.0f;
    m = 0.9f * m + g;
    theta -= 0.7f * (g + 0.9f * m);
  }
  CHECK(next.header.full);  // an fp32 downlink is sent values, not changes
  CHECK(next.values[0] == doctest::Approx(theta).epsilon(1e-6));
}

// Regression (fuzz/corpus/checkpoint/crash-manifest-float-format.bin): "format": 1.2e25 reached
// get<uint32_t>(), a float-to-integer conversion out of range (undefined; UBSan).
TEST_CASE("manifest numbers that are not non-negative integers are refused, naming the field") {
  TempDir tmp("manifest-numbers");
  server::CheckpointStore store(tmp.path(), 1);
  const auto folder = store.write(sample_state(3, 42));
  const auto ranges = ranges_of(sample_state(3, 42));
  std::ifstream in(folder / "manifest.json");
  const std::string good((std::istreambuf_iterator<char>(in)), {});
  for (const std::string bad : {"1.2e25", "-1", "1.5"}) {
    std::string text = good;
    const auto at = text.find("\"format\": 1");
    REQUIRE(at != std::string::npos);
    text.replace(at, std::string("\"format\": 1").size(), "\"format\": " + bad);
    std::ofstream(folder / "manifest.json", std::ios::trunc) << text;
    CHECK_THROWS_WITH_AS(store.load(folder, 42, ranges),
                         doctest::Contains("manifest field 'format' is"), InputError);
  }
}
