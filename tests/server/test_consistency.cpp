#include <doctest/doctest.h>

#include <algorithm>
#include <utility>

#include "core/fragments.hpp"
#include "server/shard.hpp"
#include "server/shard_map.hpp"
#include "server_fixture.hpp"

using namespace geotrain;
using namespace geotrain::test;

TEST_CASE(
    "the shard map covers the buffer with chunk-aligned ranges balanced within one chunk plus the "
    "short last one") {
  for (uint64_t elements : {1ull, 1000ull, 6144ull, 1000003ull}) {
    for (uint32_t regions : {1u, 3u}) {
      for (uint32_t per : {1u, 2u}) {
        server::ShardMap map(elements, regions, per, 1024);
        const auto& s = map.shards();
        REQUIRE(s.size() == regions * per);
        uint64_t next = 0, lo = UINT64_MAX, hi = 0;
        for (const auto& r : s) {
          CHECK(r.offset == next);
          if (r.offset + r.count != elements) CHECK((r.offset + r.count) % 1024 == 0);
          CHECK(r.region == r.id / per);
          next = r.offset + r.count;
          lo = std::min(lo, r.count);
          hi = std::max(hi, r.count);
        }
        CHECK(next == elements);
        // one chunk of rounding, plus what the short last chunk lacks
        if (elements >= 1024ull * regions * per) CHECK(hi - lo < 2048);
      }
    }
  }
  CHECK_THROWS_AS(server::ShardMap(10, 0, 1, 1024), InputError);
}

TEST_CASE("regions may own different shares: each holds its count's share of every fragment") {
  const uint64_t elements = 9 * 1024 * 40;  // 40 chunks per shard of 9
  // {1, 7, 1}: the middle region's server holds 7/9 of the model (the best-connected one).
  server::ShardMap map(elements, std::vector<uint32_t>{1, 7, 1}, 1024);
  REQUIRE(map.shards().size() == 9);
  std::vector<uint64_t> held(3, 0);
  uint64_t next = 0;
  for (const auto& r : map.shards()) {
    CHECK(r.offset == next);
    next = r.offset + r.count;
    held[r.region] += r.count;
  }
  CHECK(next == elements);
  CHECK(map.shards()[0].region == 0);
  CHECK(map.shards()[1].region == 1);
  CHECK(map.shards()[7].region == 1);
  CHECK(map.shards()[8].region == 2);
  CHECK(held == std::vector<uint64_t>{elements / 9, 7 * elements / 9, elements / 9});
  CHECK(map.owned_by(1).size() == 7);
  // With fragments: every fragment is cut the same way, fragment-major ids.
  server::ShardMap streamed(elements, std::vector<uint32_t>{2, 1}, 1024, 4);
  REQUIRE(streamed.shards().size() == 4 * 3);
  for (const auto& r : streamed.shards()) {
    CHECK(r.fragment == r.id / 3);
    CHECK(r.region == (r.id % 3 < 2 ? 0u : 1u));
  }
  // One count for every region is the uniform map, shard for shard.
  server::ShardMap uniform(elements, 3, 2, 1024, 2), listed(elements, {2, 2, 2}, 1024, 2);
  REQUIRE(uniform.shards().size() == listed.shards().size());
  for (size_t i = 0; i < uniform.shards().size(); ++i) {
    CHECK(uniform.shards()[i].offset == listed.shards()[i].offset);
    CHECK(uniform.shards()[i].region == listed.shards()[i].region);
  }
  CHECK_THROWS_WITH_AS(server::ShardMap(elements, std::vector<uint32_t>{1, 0}, 1024),
                       doctest::Contains("shards_per_region is 0"), InputError);
}

TEST_CASE("with fragments every shard lies in one fragment and every region owns part of each") {
  const uint64_t elements = 1000003;
  const auto frags = fragment_ranges(elements, 4, 1024);
  REQUIRE(frags.size() == 4);
  server::ShardMap map(elements, 3, 2, 1024, 4);
  const auto& s = map.shards();
  REQUIRE(s.size() == 4 * 3 * 2);
  uint64_t next = 0;
  for (const auto& r : s) {
    CHECK(r.offset == next);
    next = r.offset + r.count;
    CHECK(r.fragment == r.id / 6);  // fragment-major ids: what a leader relies on
    CHECK(r.region == (r.id % 6) / 2);
    CHECK(r.offset >= frags[r.fragment].offset);
    CHECK(r.offset + r.count <= frags[r.fragment].end());
    CHECK(fragment_of(frags, r.offset) == r.fragment);
  }
  CHECK(next == elements);
  // Fragments are equal within a chunk; one fragment is the plain map, shard for shard.
  for (const auto& f : frags) CHECK(f.count >= elements / 4 - 1024);
  server::ShardMap plain(elements, 3, 2, 1024), one(elements, 3, 2, 1024, 1);
  REQUIRE(plain.shards().size() == one.shards().size());
  for (size_t i = 0; i < plain.shards().size(); ++i) {
    CHECK(plain.shards()[i].offset == one.shards()[i].offset);
    CHECK(plain.shards()[i].count == one.shards()[i].count);
  }
  CHECK_THROWS_AS(fragment_ranges(elements, 0, 1024), InputError);
}

TEST_CASE("a table with fewer chunks than fragments: the empty fragments get empty shards") {
  // 161 elements are one 1024-element chunk, so fragment 1 of 2 is empty. Its shards once
  // covered the whole table again, and leaders refused the map ("shards cover 322 of 161").
  server::ShardMap map(161, 2, 1, 1024, 2);
  const auto& s = map.shards();
  REQUIRE(s.size() == 2 * 2);
  uint64_t covered = 0, next = 0;
  for (const auto& r : s) {
    CHECK(r.offset == next);
    next = r.offset + r.count;
    covered += r.count;
    if (r.fragment == 1) CHECK(r.count == 0);
  }
  CHECK(covered == 161);
}

TEST_CASE("cut_pieces cuts ranges with gaps as one sequence, a part across a gap per piece") {
  const std::vector<ElementRange> pieces{{0, 100}, {200, 100}};
  const auto three = cut_pieces(pieces, 3, 1);  // parts of 67, 66, 67 elements of the sequence
  REQUIRE(three.size() == 3);
  REQUIRE(three[0].size() == 1);
  CHECK((three[0][0].offset == 0 && three[0][0].count == 67));
  REQUIRE(three[1].size() == 2);  // [67, 100) and [200, 233)
  CHECK((three[1][0].offset == 67 && three[1][0].count == 33));
  CHECK((three[1][1].offset == 200 && three[1][1].count == 33));
  REQUIRE(three[2].size() == 1);
  CHECK((three[2][0].offset == 233 && three[2][0].count == 67));
  // Chunk-aligned in the sequence: 4 parts of 50-element chunks are the 4 halves of the pieces.
  const auto four = cut_pieces(pieces, 4, 50);
  for (size_t i = 0; i < 4; ++i) {
    REQUIRE(four[i].size() == 1);
    CHECK(four[i][0].offset == (i < 2 ? 50 * i : 200 + 50 * (i - 2)));
    CHECK(four[i][0].count == 50);
  }
  CHECK(cut_pieces({}, 2, 8) == std::vector<std::vector<ElementRange>>(2));
  const auto left = subtract_ranges({0, 1000}, {{0, 10}, {500, 20}, {990, 50}});
  REQUIRE(left.size() == 2);
  CHECK((left[0].offset == 10 && left[0].count == 490));
  CHECK((left[1].offset == 520 && left[1].count == 470));
}

TEST_CASE(
    "critical ranges kept out of streaming form fragment P; the rest splits into P equal parts") {
  const uint64_t elements = 100000, chunk = 256;
  const uint32_t regions = 3, fragments = 4;
  const std::vector<ElementRange> critical{{0, 500}, {40000, 3000}, {99000, 1000}};
  server::ShardMap map(elements, regions, 1, chunk, fragments, critical);
  CHECK(map.fragment_count() == fragments + 1);
  std::vector<int> owner(elements, -1);  // the fragment of each element
  std::vector<std::vector<uint64_t>> size(fragments + 1, std::vector<uint64_t>(regions, 0));
  std::vector<std::vector<int>> shards(fragments + 1, std::vector<int>(regions, 0));
  for (size_t i = 0; i < map.shards().size(); ++i) {
    const auto& s = map.shards()[i];
    CHECK(s.id == i);
    if (i > 0) CHECK(s.fragment >= map.shards()[i - 1].fragment);  // fragment order
    for (uint64_t e = s.offset; e < s.offset + s.count; ++e) {
      REQUIRE(owner[e] == -1);  // covered once
      owner[e] = static_cast<int>(s.fragment);
    }
    size[s.fragment][s.region] += s.count;
    ++shards[s.fragment][s.region];
  }
  auto is_critical = [&](uint64_t e) {
    for (const auto& c : critical)
      if (e >= c.offset && e < c.end()) return true;
    return false;
  };
  for (uint64_t e = 0; e < elements; ++e) {
    REQUIRE(owner[e] != -1);
    REQUIRE((owner[e] == int(fragments)) == is_critical(e));  // critical iff fragment P
  }
  // Fragments 0..P-1 in layer order, each about a quarter of the 95,500 streamed elements.
  for (uint64_t e = 1; e < elements; ++e)
    if (!is_critical(e) && !is_critical(e - 1)) REQUIRE(owner[e] >= owner[e - 1]);
  for (uint32_t f = 0; f <= fragments; ++f) {
    uint64_t total = 0, lo = UINT64_MAX, hi = 0;
    for (uint32_t r = 0; r < regions; ++r) {
      CHECK(shards[f][r] >= 1);  // every region's server owns part of every fragment
      total += size[f][r];
      lo = std::min(lo, size[f][r]);
      hi = std::max(hi, size[f][r]);
    }
    CHECK(hi - lo <= 2 * chunk);  // a chunk of rounding, plus a short last chunk
    // Within a chunk of a quarter, but the last part lacks what the short last chunk does.
    if (f < fragments) CHECK(total >= 95500 / 4 - 2 * chunk);
    if (f < fragments) CHECK(total <= 95500 / 4 + chunk);
  }
  // Without fragments there is nothing to keep out of: the plain map.
  server::ShardMap one(elements, regions, 1, chunk, 1, critical);
  CHECK(one.fragment_count() == 1);
  CHECK(one.shards().size() == regions);
  CHECK_THROWS_AS(server::ShardMap(elements, regions, 1, chunk, 2, {{500, 10}, {0, 10}}),
                  InputError);
}

TEST_CASE("a synchronous round equals the exact average of the regions' deltas") {
  TempDir tmp("sync");
  const auto& dir = tmp.path();
  Cluster cluster(small_config(dir, 0));
  auto a = cluster.client(), b = cluster.client(), c = cluster.client();
  hello(a, "a", cluster.table_hash());
  hello(b, "b", cluster.table_hash());
  hello(c, "c", cluster.table_hash());
  std::vector<float> da(kShard), db(kShard), dc(kShard);
  for (size_t i = 0; i < kShard; ++i) {
    da[i] = static_cast<float>(i % 7);  // small integers: the average is exact
    db[i] = -2.0f * static_cast<float>(i % 5);
    dc[i] = 0.5f;
  }
  push(a, 1, da);
  push(b, 1, db);
  // Round 1 is not released while c has not pushed: a's pull for round 1 waits.
  auto waiting = a.send(wire::PullRequest{0, 0, true, 1});
  REQUIRE(waiting);
  CHECK(stats(b)["shards"][0]["released_round"] == 0);
  push(c, 1, dc);
  auto r = a.receive(20s);
  REQUIRE(r);
  REQUIRE(r->header.request_id == *waiting);
  const auto& reply = as<wire::PullReply>(*r);
  CHECK(reply.round == 1);
  std::vector<float> values(kShard);
  compression::decode_payload(wire::frame_bytes(r->payloads.at(0)), values);
  for (size_t i = 0; i < kShard; ++i) {
    // critical: (da+db+dc)/3 once; non-critical: each push applied on arrival as d/3
    const float expected =
        i < kCrit ? (da[i] + db[i] + dc[i]) / 3.0f : da[i] / 3.0f + db[i] / 3.0f + dc[i] / 3.0f;
    if (i < kCrit)
      REQUIRE(values[i] == expected);
    else
      REQUIRE(values[i] == doctest::Approx(expected).epsilon(1e-6));
  }
}

TEST_CASE("the gate blocks a region s+1 rounds ahead and releases it when the slowest catches up") {
  TempDir tmp("gate");
  const auto& dir = tmp.path();
  const uint32_t s = 2;
  Cluster cluster(small_config(dir, s, kOnlyRegistered));  // a and b take part, c does not
  auto fast = cluster.client(), slow = cluster.client();
  hello(fast, "a", cluster.table_hash());
  hello(slow, "b", cluster.table_hash());
  auto zero = filled(kShard, 0.0f);
  for (uint64_t t = 1; t <= s + 1; ++t)
    CHECK(push(fast, t, zero).round == t);      // s rounds ahead: admitted
  auto blocked = send_push(fast, s + 2, zero);  // s+1 ahead: waits
  auto st = stats(slow);
  CHECK(st["parked"] == 1);
  CHECK(st["shards"][0]["clocks"][0] == s + 1);
  push(slow, 1, zero);
  auto r = fast.receive(20s);
  REQUIRE(r);
  CHECK(r->header.request_id == blocked);
  CHECK(as<wire::PushReply>(*r).round == s + 2);
  auto after = stats(slow);
  CHECK(after["parked"] == 0);
  CHECK(after["regions"]["a"]["gate_waits"] == 1);
}

TEST_CASE("staleness weighting 1/(1+tau) scales a stale non-critical delta") {
  TempDir tmp("weight");
  const auto& dir = tmp.path();
  Cluster cluster(
      small_config(dir, 3, std::string(kOnlyRegistered) + "\n  staleness_weighting: inverse"));
  auto fast = cluster.client(), slow = cluster.client();
  hello(fast, "a", cluster.table_hash());
  hello(slow, "b", cluster.table_hash());
  auto one = filled(kShard, 1.0f);
  CHECK(push(fast, 1, one).staleness == 0);
  CHECK(push(fast, 2, one).staleness == 0);
  CHECK(push(fast, 3, one).staleness == 0);
  auto late = push(slow, 1, one);  // the fast region is 2 rounds ahead of this push
  CHECK(late.staleness == 2);
  auto p = pull(slow, true);
  // two live regions: each fresh push adds 1/2, the stale one (1/(1+2)) * 1/2
  const float expected = 0.5f + 0.5f + 0.5f + (1.0f / 3.0f) * 1.0f / 2.0f;
  CHECK(p.values[kCrit] == doctest::Approx(expected).epsilon(1e-6));
  CHECK(p.values[kShard - 1] == doctest::Approx(expected).epsilon(1e-6));
  CHECK(server::staleness_weight(server::StalenessWeighting::inverse, 4) == doctest::Approx(0.2));
  CHECK(server::staleness_weight(server::StalenessWeighting::none, 4) == 1.0f);
  auto hist = stats(slow)["regions"]["b"]["staleness_histogram"];
  CHECK(hist[2] == 1);
}

TEST_CASE(
    "downlink error feedback: what a region reconstructed plus its residual equals the values") {
  server::ShardSettings settings;
  settings.downlink_codec = "int8:chunk=64";
  server::ShardRange range{0, 0, 3000, 0};
  server::Shard shard(range, std::vector<uint8_t>(3000, 0), 2, settings);
  const std::vector<bool> live{true, true};
  auto full = shard.pull_copy(1, true);
  std::vector<float> view(3000);
  compression::decode_payload(full, view);
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> delta(3000), change(3000);
  for (uint64_t t = 1; t <= 12; ++t) {
    for (size_t region = 0; region < 2; ++region) {
      for (float& x : delta) x = d(rng);
      shard.apply_push(region, t, delta, live);
    }
    const auto payload = shard.pull_copy(1, false);
    REQUIRE(compression::parse_header(payload).codec == compression::CodecId::int8);
    compression::decode_payload(payload, change);
    for (size_t i = 0; i < 3000; ++i) view[i] += change[i];
    auto e = shard.downlink_residual(1);
    REQUIRE(e.size() == 3000);
    double err = 0;
    for (size_t i = 0; i < 3000; ++i) {
      REQUIRE(std::fabs(view[i] + e[i] - shard.values()[i]) <=
              1e-4f * (1.0f + std::fabs(shard.values()[i])));
      err = std::max(err, static_cast<double>(std::fabs(e[i])));
    }
    CHECK(err > 0.0);  // int8 is lossy: the residual carries something
    CHECK(shard.sent_version(1) == shard.version());
  }
}

TEST_CASE(
    "a region's downlink codec override applies to its pulls only, each region keeping its own EF "
    "stream") {
  TempDir tmp("downlink");
  Cluster cluster(small_config(tmp.path(), 0, "  downlink_codecs: {b: onebit, c: onebit}"));
  auto a = cluster.client(), b = cluster.client(), c = cluster.client();
  hello(a, "a", cluster.table_hash());
  hello(b, "b", cluster.table_hash());
  hello(c, "c", cluster.table_hash());
  const uint64_t v0 = pull(a, true).header.version;
  CHECK(pull(b, true).header.version == v0);
  CHECK(pull(c, true).header.version == v0);
  std::vector<float> delta(kShard);
  for (size_t i = 0; i < kShard; ++i) delta[i] = static_cast<float>((i * 37) % 101) / 100.0f - 0.5f;
  push(a, 1, delta);
  push(b, 1, delta);
  push(c, 1, delta);

  auto pa = pull(a, false, v0, 1);  // fp32: a is sent the server's values themselves
  CHECK(pa.header.full);
  REQUIRE(pa.header.segments.size() == 1);
  CHECK(pa.codec == compression::CodecId::fp32);
  const auto& truth = pa.values;
  auto pb1 = pull(b, false, v0, 1);
  CHECK_FALSE(pb1.header.full);
  CHECK(pb1.codec == compression::CodecId::onebit);
  CHECK(pb1.header.segments[0].bytes * 16 < pa.header.segments[0].bytes);
  auto error = [&](const std::vector<float>& view) {
    double e = 0;
    for (size_t i = 0; i < kShard; ++i)
      e += (double(view[i]) - truth[i]) * (double(view[i]) - truth[i]);
    return e;
  };
  const double err1 = error(pb1.values);
  CHECK(err1 > 0.0);  // onebit is lossy
  // No new change: b's second pull carries only its residual, and b's view gets closer.
  auto pb2 = pull(b, false, pb1.header.version, 1);
  std::vector<float> view_b(kShard);
  for (size_t i = 0; i < kShard; ++i) view_b[i] = pb1.values[i] + pb2.values[i];
  CHECK(error(view_b) < err1);
  // c's stream is its own: b's two pulls left it untouched, so c's first change is b's first.
  auto pc1 = pull(c, false, v0, 1);
  CHECK(pc1.values == pb1.values);
}

TEST_CASE("a pull sent right behind its push, for the round being pushed, waits for that round") {
  TempDir tmp("pipelined");
  Cluster cluster(small_config(tmp.path(), 0, kOnlyRegistered));
  auto a = cluster.client(), b = cluster.client();
  hello(a, "a", cluster.table_hash());
  hello(b, "b", cluster.table_hash());
  push(a, 1, filled(kShard, 2.0f));
  push(b, 1, filled(kShard, 4.0f));
  as<wire::PullReply>(expect_reply(a, wire::PullRequest{0, 0, true, 1}));  // values of round 1
  // Round 2: a pushes and pulls at once (a pull for round 2 names the round a is pushing).
  const auto pushed = send_push(a, 2, filled(kShard, 1.0f));
  auto pulled = a.send(wire::PullRequest{0, 0, true, 2});
  REQUIRE(pulled);
  CHECK(as<wire::PushReply>(next_reply(a, pushed)).round == 2);
  CHECK(stats(b)["parked"] == 1);  // the pull waits for b's round 2
  push(b, 2, filled(kShard, 3.0f));
  const auto second = next_reply(a, *pulled);
  CHECK(as<wire::PullReply>(second).round == 2);
  CHECK(payload_values(second)[0] == 5.0f);  // critical: (2 + 4) / 2 + (1 + 3) / 2
  // Two rounds ahead of what the region pushed is still an error.
  auto too_far = expect_reply(a, wire::PullRequest{0, 0, true, 4});
  REQUIRE(std::holds_alternative<wire::Error>(too_far.header.body));
  CHECK(std::get<wire::Error>(too_far.header.body).code == wire::ErrorCode::bad_round);
}

TEST_CASE("a push that skips rounds sits them out: they are released without it") {
  TempDir tmp("sit-out");
  Cluster cluster(small_config(tmp.path(), 0, kOnlyRegistered));  // a and b, staleness bound 0
  auto a = cluster.client(), b = cluster.client();
  hello(a, "a", cluster.table_hash());
  hello(b, "b", cluster.table_hash());
  push(a, 1, filled(kShard, 2.0f));
  push(b, 1, filled(kShard, 4.0f));
  // Without skip, a later round than the next is refused, and changes nothing.
  auto refused = expect_reply(a, push_header(0, 4, 0, encode(filled(kShard, 1.0f))),
                              frames(encode(filled(kShard, 1.0f))));
  REQUIRE(std::holds_alternative<wire::Error>(refused.header.body));
  CHECK(std::get<wire::Error>(refused.header.body).code == wire::ErrorCode::bad_round);
  CHECK(stats(a)["shards"][0]["clocks"][0] == 1);
  // With skip: a sits out rounds 2 and 3 at once; its round-4 push waits for b at the gate, and a
  // pull right behind it may name round 4.
  const auto skipping = send_push(a, 4, filled(kShard, 6.0f), 0, true);
  const auto waiting = a.send(wire::PullRequest{0, 0, true, 4});
  REQUIRE(waiting);
  auto st = stats(a);  // after the push and the pull (one connection keeps their order)
  CHECK(st["shards"][0]["clocks"][0] == 3);
  CHECK(st["regions"]["a"]["rounds_sat_out"] == 2);
  CHECK(st["parked"] == 2);
  CHECK(st["shards"][0]["released_round"] == 1);
  const auto version = st["shards"][0]["version"].get<uint64_t>();
  // b's pulls say how far the others are: a's clock, 3 (b sits out up to it when it is further
  // behind than the staleness bound).
  CHECK(pull(b, true).header.frontier == 3);
  // b's rounds 2 and 3 are released on b's deltas alone (critical: b's own, not halved).
  push(b, 2, filled(kShard, 8.0f));
  push(b, 3, filled(kShard, 8.0f));
  CHECK(as<wire::PushReply>(next_reply(a, skipping)).round == 4);
  push(b, 4, filled(kShard, 2.0f));
  const auto p = next_reply(a, *waiting);
  CHECK(as<wire::PullReply>(p).round == 4);
  CHECK(payload_values(p)[0] == 3.0f + 8.0f + 8.0f + 4.0f);  // critical: (2+4)/2, 8, 8, (6+2)/2
  CHECK(stats(b)["shards"][0]["version"].get<uint64_t>() > version);
  // A round both sit out is released with no step (a step on no deltas would divide by zero).
  const auto zeros = filled(kShard, 0.0f);
  const auto a6 = send_push(a, 6, zeros, 0, true);
  CHECK(as<wire::PushReply>(expect_reply(
                                b,
                                [&] {
                                  auto h = push_header(0, 6, 0, encode(zeros));
                                  h.skip = true;
                                  return h;
                                }(),
                                frames(encode(zeros))))
            .round == 6);
  CHECK(as<wire::PushReply>(next_reply(a, a6)).round == 6);
  const auto after = pull(a, true, 0, 6);
  CHECK(after.header.round == 6);
  CHECK(after.values[0] == 23.0f);
  CHECK(stats(b)["regions"]["b"]["rounds_sat_out"] == 1);
}

TEST_CASE("an absent push sits out every round up to its own at once, and carries no delta") {
  TempDir tmp("absent");
  Cluster cluster(small_config(tmp.path(), 0, kOnlyRegistered));  // a and b, staleness bound 0
  auto a = cluster.client(), b = cluster.client();
  hello(a, "a", cluster.table_hash());
  hello(b, "b", cluster.table_hash());
  push(a, 1, filled(kShard, 2.0f));
  push(b, 1, filled(kShard, 4.0f));
  // a pushes round 2 and pulls right behind it: the round waits for b.
  const auto pushed = send_push(a, 2, filled(kShard, 6.0f));
  const auto waiting = a.send(wire::PullRequest{0, 0, true, 2});
  REQUIRE(waiting);
  CHECK(as<wire::PushReply>(next_reply(a, pushed)).round == 2);
  // b's shard is deferred: its push of rounds 2 and 3 will not come. Said at once, a's round 2
  // is released on a's delta alone (critical: not halved), without waiting for b's next push.
  wire::Push absent{0, 3, 0, {}, 0, false, false, true};
  CHECK(as<wire::PushReply>(expect_reply(b, absent)).round == 3);
  const auto released = next_reply(a, *waiting);
  CHECK(as<wire::PullReply>(released).round == 2);
  CHECK(payload_values(released)[0] == 3.0f + 6.0f);
  auto st = stats(b);
  CHECK(st["shards"][0]["clocks"][1] == 3);
  CHECK(st["regions"]["b"]["rounds_sat_out"] == 2);
  // Absent from a round it sat out already (a push that skipped overtook it): no change.
  absent.round = 2;
  CHECK(as<wire::PushReply>(expect_reply(b, absent)).round == 2);
  st = stats(b);
  CHECK(st["shards"][0]["clocks"][1] == 3);
  CHECK(st["regions"]["b"]["rounds_sat_out"] == 2);
  // An absent push with a delta, or one sitting out more than kMaxRoundsSatOut, is refused, and
  // changes nothing.
  auto payload = encode(filled(kShard, 1.0f));
  auto with_delta = push_header(0, 5, 0, payload);
  with_delta.absent = true;
  auto refused = expect_reply(b, with_delta, frames(std::move(payload)));
  REQUIRE(std::holds_alternative<wire::Error>(refused.header.body));
  CHECK(std::get<wire::Error>(refused.header.body).code == wire::ErrorCode::malformed);
  absent.round = 4 + server::kMaxRoundsSatOut;
  refused = expect_reply(b, absent);
  REQUIRE(std::holds_alternative<wire::Error>(refused.header.body));
  CHECK(std::get<wire::Error>(refused.header.body).code == wire::ErrorCode::bad_round);
  CHECK(stats(b)["shards"][0]["clocks"][1] == 3);
  // Its next push is round 4, with a.
  const auto b4 = send_push(b, 4, filled(kShard, 2.0f));
  push(a, 3, filled(kShard, 1.0f));
  push(a, 4, filled(kShard, 4.0f));
  CHECK(as<wire::PushReply>(next_reply(b, b4)).round == 4);
  CHECK(pull(a, true, 0, 4).values[0] == 9.0f + 1.0f + 3.0f);
}

// Outer momentum under asynchrony (server/outer_optimizer.hpp, "Momentum under asynchrony"):
// non-critical elements are stepped on every push, and their momentum still moves once a round.
namespace {

constexpr size_t kRegions = 3, kElements = 8;
const std::vector<bool> kThreeLive(kRegions, true);

// Region r's round-t delta at element i: different for every region, round and element.
float delta_at(size_t r, uint64_t t, size_t i) {
  return (1.0f + static_cast<float>(r)) * (t % 2 == 1 ? 0.5f : -0.25f) +
         0.125f * static_cast<float>(i) - 0.0625f * static_cast<float>(t);
}
std::vector<float> delta_of(size_t r, uint64_t t) {
  std::vector<float> d(kElements);
  for (size_t i = 0; i < kElements; ++i) d[i] = delta_at(r, t, i);
  return d;
}

// The synchronous outer step, by hand, on every element (DiLoCo: g = -mean delta), after
// `rounds` rounds in which each region pushed delta_of(r, t) once.
struct HandSteps {
  std::vector<float> theta = std::vector<float>(kElements, 0.0f);
  std::vector<float> m = std::vector<float>(kElements, 0.0f);
};
HandSteps synchronous(const server::OuterOptimizerConfig& c, uint64_t rounds) {
  HandSteps out;
  for (uint64_t t = 1; t <= rounds; ++t) {
    for (size_t i = 0; i < kElements; ++i) {
      const float g = -(delta_at(0, t, i) + delta_at(1, t, i) + delta_at(2, t, i)) / 3.0f;
      out.m[i] = c.momentum * out.m[i] + g;
      out.theta[i] -= c.nesterov ? c.lr * (g + c.momentum * out.m[i]) : c.lr * out.m[i];
    }
  }
  return out;
}

void check_synchronous(const server::Shard& shard, const HandSteps& hand) {
  for (size_t i = 0; i < kElements; ++i) {
    CAPTURE(i);
    CHECK(shard.values()[i] == doctest::Approx(hand.theta[i]).epsilon(1e-6));
    CHECK(shard.momentum()[i] == doctest::Approx(hand.m[i]).epsilon(1e-6));
  }
}

// Every other element critical, or none.
std::vector<uint8_t> momentum_mask(bool critical) {
  std::vector<uint8_t> mask(kElements, 0);
  if (critical)
    for (size_t i = 0; i < kElements; i += 2) mask[i] = 1;
  return mask;
}

}  // namespace

TEST_CASE(
    "with momentum, a non-critical shard after each round of three pushes holds the synchronous "
    "step's values and momentum, plain and Nesterov") {
  for (bool nesterov : {false, true}) {
    for (bool critical : {false, true}) {  // critical elements beside them take the merged step
      CAPTURE(nesterov);
      CAPTURE(critical);
      server::ShardSettings settings;
      settings.optimizer = {0.7f, 0.9f, nesterov};
      server::Shard shard({0, 0, kElements, 0}, momentum_mask(critical), kRegions, settings);
      for (uint64_t t = 1; t <= 3; ++t) {
        for (size_t r = 0; r < kRegions; ++r) {
          shard.apply_push(r, t, delta_of(r, t), kThreeLive);
          shard.release_ready(kThreeLive);  // as the server does after every push
        }
        REQUIRE(shard.released_round() == t);
        check_synchronous(shard, synchronous(settings.optimizer, t));
      }
    }
  }
}

TEST_CASE(
    "the order in which a non-critical shard's pushes arrive, a region running a round ahead "
    "included, does not change its values and momentum after the last round") {
  using Push = std::pair<size_t, uint64_t>;  // (region, round)
  const std::vector<std::vector<Push>> orders{
      {{0, 1}, {1, 1}, {2, 1}, {0, 2}, {1, 2}, {2, 2}, {0, 3}, {1, 3}, {2, 3}},  // lockstep
      {{2, 1}, {1, 1}, {0, 1}, {2, 2}, {1, 2}, {0, 2}, {1, 3}, {2, 3}, {0, 3}},  // reversed
      // region 0 a round ahead: its round-2 and round-3 pushes come before the others' round 1, 2
      {{0, 1}, {0, 2}, {1, 1}, {2, 1}, {0, 3}, {2, 2}, {1, 2}, {1, 3}, {2, 3}},
      // region 2 ahead, region 1 last in every round
      {{2, 1}, {0, 1}, {2, 2}, {1, 1}, {0, 2}, {2, 3}, {1, 2}, {0, 3}, {1, 3}},
  };
  for (bool nesterov : {false, true}) {
    CAPTURE(nesterov);
    server::ShardSettings settings;
    settings.optimizer = {0.7f, 0.9f, nesterov};
    settings.staleness_bound = 1;  // weighting none: a push one round stale still weighs 1
    const auto hand = synchronous(settings.optimizer, 3);
    for (size_t o = 0; o < orders.size(); ++o) {
      CAPTURE(o);
      server::Shard shard({0, 0, kElements, 0}, momentum_mask(true), kRegions, settings);
      for (const auto& [r, t] : orders[o]) {
        REQUIRE(shard.admits(t, kThreeLive));
        shard.apply_push(r, t, delta_of(r, t), kThreeLive);
        shard.release_ready(kThreeLive);
      }
      REQUIRE(shard.released_round() == 3);
      check_synchronous(shard, hand);
    }
  }
}

// Fails on the code before the split (issue 27, item 4): each push ran the whole outer step on
// the non-critical elements, m = mu*m + g_i once per push, so a round of three pushes of 1 left
// m = -(1 + mu + mu^2)/3 = -0.903 instead of -1, and a round of zero deltas then decayed it by
// mu^3 = 0.729 instead of mu = 0.9 (and with Nesterov added the look-ahead three times).
TEST_CASE("a non-critical shard's momentum decays by mu once per round, not by mu^R per push") {
  server::ShardSettings settings;
  settings.optimizer = {1.0f, 0.9f, false};
  server::Shard shard({0, 0, 1, 0}, {0}, kRegions, settings);
  for (size_t r = 0; r < kRegions; ++r)
    shard.apply_push(r, 1, std::vector<float>{1.0f}, kThreeLive);
  shard.release_ready(kThreeLive);
  // Round 1: g = -1, m = -1, theta = 0 - 1 * m = 1.
  CHECK(shard.momentum()[0] == doctest::Approx(-1.0f).epsilon(1e-6));
  CHECK(shard.values()[0] == doctest::Approx(1.0f).epsilon(1e-6));
  for (size_t r = 0; r < kRegions; ++r)
    shard.apply_push(r, 2, std::vector<float>{0.0f}, kThreeLive);
  shard.release_ready(kThreeLive);
  // Round 2, zero deltas: m = 0.9 * -1, and theta moves by the momentum alone: 1 + 0.9.
  CHECK(shard.momentum()[0] == doctest::Approx(-0.9f).epsilon(1e-6));
  CHECK(shard.values()[0] == doctest::Approx(1.9f).epsilon(1e-6));
}

// Checkpoints keep values and momentum, not a round's accumulator (server/shard.hpp): at a
// round boundary there is none, so a shard restored there goes on as if it had never stopped.
TEST_CASE(
    "a non-critical shard with momentum restored at a round boundary steps the next round as the "
    "one that never stopped") {
  server::ShardSettings settings;
  settings.optimizer = {0.7f, 0.9f, true};
  server::Shard running({0, 0, kElements, 0}, momentum_mask(true), kRegions, settings);
  server::Shard restored({0, 0, kElements, 0}, momentum_mask(true), kRegions, settings);
  for (uint64_t t = 1; t <= 2; ++t)
    for (size_t r = 0; r < kRegions; ++r) {
      running.apply_push(r, t, delta_of(r, t), kThreeLive);
      running.release_ready(kThreeLive);
    }
  const std::vector<float> values(running.values().begin(), running.values().end());
  const std::vector<float> momentum(running.momentum().begin(), running.momentum().end());
  restored.restore(running.version(), running.released_round(), values, momentum);
  for (auto* shard : {&running, &restored})
    for (size_t r = 0; r < kRegions; ++r) {
      shard->apply_push(r, 3, delta_of(r, 3), kThreeLive);
      shard->release_ready(kThreeLive);
    }
  CHECK(std::equal(running.values().begin(), running.values().end(), restored.values().begin()));
  CHECK(std::equal(running.momentum().begin(), running.momentum().end(),
                   restored.momentum().begin()));
  check_synchronous(restored, synchronous(settings.optimizer, 3));
}
