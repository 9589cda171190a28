// The server's fused passes and buffer reuse (server/shard_kernels.hpp, outer_optimizer.hpp,
// payload_pool.hpp, value_buffer.hpp, pass_splitter.hpp)
// against the unfused or single-threaded reference they replace: equal bit for bit, not within a
// tolerance.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <thread>

#include "compression/error_feedback.hpp"
#include "compression/factory.hpp"
#include "compression/payload.hpp"
#include "core/error.hpp"
#include "server/huge_pages.hpp"
#include "server/outer_optimizer.hpp"
#include "server/pass_splitter.hpp"
#include "server/payload_pool.hpp"
#include "server/shard.hpp"
#include "server/shard_kernels.hpp"
#include "server/value_buffer.hpp"
#include "server_fixture.hpp"

using namespace geotrain;
using namespace geotrain::test;

namespace {

std::vector<float> gaussian(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

bool same_bits(ConstFloatSpan a, ConstFloatSpan b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The optimizer as it was before scaling was folded in: scratch = w * delta / div, then the
// step on selected elements only.
void reference_step(const server::OuterOptimizerConfig& c, std::vector<float>& theta,
                    std::vector<float>& m, const std::vector<float>& delta,
                    const std::vector<uint8_t>& mask, uint8_t select, float w, float div) {
  for (size_t i = 0; i < theta.size(); ++i) {
    if (!mask.empty() && mask[i] != select) continue;
    const float g = -(w * delta[i] / div);
    if (c.momentum == 0.0f) {
      theta[i] -= c.lr * g;
      continue;
    }
    m[i] = c.momentum * m[i] + g;
    theta[i] -= c.nesterov ? c.lr * (g + c.momentum * m[i]) : c.lr * m[i];
  }
}

}  // namespace

TEST_CASE(
    "the optimizer step with the scaling folded in equals scaling first, for every optimizer, "
    "masked or not") {
  const size_t n = 5000;  // not a multiple of any vector width
  const auto delta = gaussian(n, 1);
  std::vector<uint8_t> mask(n);
  for (size_t i = 0; i < n; ++i) mask[i] = static_cast<uint8_t>(i % 3 == 0);
  for (const auto& config : {server::OuterOptimizerConfig{{1.0f, 0.0f, false}},
                             server::OuterOptimizerConfig{{0.7f, 0.9f, false}},
                             server::OuterOptimizerConfig{{0.7f, 0.9f, true}}}) {
    for (bool masked : {false, true}) {
      CAPTURE(config.describe());
      CAPTURE(masked);
      const auto theta = gaussian(n, 2), m = gaussian(n, 3);
      auto ref_theta = theta, ref_m = m;
      const auto& sel = masked ? mask : std::vector<uint8_t>();
      std::vector<float> theta_out(n, -1.0f), m_out(n, -1.0f);
      server::outer_step(config, theta, m, delta, sel, 0, {1.0f / 3.0f, 2.0f}, theta_out, m_out);
      reference_step(config, ref_theta, ref_m, delta, sel, 0, 1.0f / 3.0f, 2.0f);
      CHECK(same_bits(theta_out, ref_theta));
      // Without momentum m is not the optimizer's: m_out is left alone.
      CHECK(same_bits(m_out, config.momentum == 0.0f ? std::vector<float>(n, -1.0f) : ref_m));
    }
  }
}

TEST_CASE("all_finite finds a NaN or an infinity anywhere, block boundaries included") {
  const size_t n = 3 * 4096 + 17;
  std::vector<float> x(n, 1.0f);
  x[5] = std::numeric_limits<float>::max();
  x[6] = std::numeric_limits<float>::denorm_min();
  x[7] = -0.0f;
  CHECK(server::all_finite(x));
  CHECK(server::all_finite(ConstFloatSpan{}));
  for (size_t at : {size_t{0}, size_t{4095}, size_t{4096}, n - 1}) {
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity()}) {
      auto y = x;
      y[at] = bad;
      CHECK_FALSE(server::all_finite(y));
    }
  }
}

TEST_CASE("take_change returns values - sent and leaves sent equal to the values") {
  const auto values = gaussian(1000, 4);
  auto sent = gaussian(1000, 5);
  const auto before = sent;
  std::vector<float> g(1000);
  server::take_change(values, sent, g);
  for (size_t i = 0; i < 1000; ++i) REQUIRE(g[i] == values[i] - before[i]);
  CHECK(same_bits(sent, values));
}

TEST_CASE(
    "a region with the fp32 downlink is sent the values themselves, without a copy, and a later "
    "push leaves the sent version as it was") {
  const size_t n = 70000;          // more than one checksum block, and not a multiple of one
  server::ShardSettings settings;  // fp32 downlink
  settings.downlink_codec_for[0] = "int8";
  server::Shard shard(server::ShardRange{0, 0, n, 0}, std::vector<uint8_t>(n, 0), 2, settings);
  const std::vector<bool> live{true, true};
  CHECK(shard.pull_sends_values(1, false));  // fp32: every pull
  CHECK(shard.pull_sends_values(0, true));   // int8: full pulls only
  CHECK_FALSE(shard.pull_sends_values(0, false));
  shard.apply_push(0, 1, gaussian(n, 1), live);
  const auto sent = shard.pull_values(1);
  CHECK(shard.has_downlink(1));
  CHECK(shard.sent_version(1) == shard.version());
  CHECK(sent->values().data() == shard.values().data());  // shared, not copied
  const auto payload = sent->payload();
  const Bytes copy(payload.begin(), payload.end());
  std::vector<float> decoded(n);
  compression::decode_payload(payload, decoded);
  CHECK(same_bits(decoded, shard.values()));
  CHECK(shard.pull_values(1).get() == sent.get());  // the same version: the same buffer again
  // The next version is computed beside the sent one, which stays whole while ZeroMQ sends it.
  shard.apply_push(1, 1, gaussian(n, 2), live);
  CHECK(shard.values().data() != sent->values().data());
  CHECK(std::equal(copy.begin(), copy.end(), sent->payload().begin()));
  compression::decode_payload(sent->payload(), decoded);  // still sound: checksum and all
  CHECK_FALSE(same_bits(decoded, shard.values()));
}

TEST_CASE(
    "a downlink schedule switches a region's codec at the round it pushed, from fp32 values to "
    "int8 changes to onebit, and the residual goes on with the new codec") {
  const size_t n = 5000;
  server::ShardSettings settings;
  settings.downlink_codec = compression::CodecSchedule::from_phases(
      {{1, "fp32"}, {2, "int8"}, {std::nullopt, "onebit"}}, "server.downlink_codec");
  settings.downlink_codec_for[1] = "int8";  // region 1 keeps one codec
  server::Shard shard(server::ShardRange{0, 0, n, 0}, std::vector<uint8_t>(n, 0), 2, settings);
  const std::vector<bool> live{true, true};
  REQUIRE(shard.start_downlink_from_zero(0));
  std::vector<float> held(n, 0.0f);  // what region 0 holds: the sum of what it was sent
  auto pull = [&] {
    const auto payload = shard.pull_copy(0, false);
    const auto codec = compression::parse_header(payload).codec;
    std::vector<float> d(n);
    compression::decode_payload(payload, d);
    for (size_t i = 0; i < n; ++i)
      held[i] = codec == compression::CodecId::fp32 ? d[i] : held[i] + d[i];
    return codec;
  };

  // Round 1 (fp32): the values themselves.
  shard.apply_push(0, 1, gaussian(n, 1), live);
  CHECK(shard.pull_sends_values(0, false));
  CHECK(shard.downlink_codec(0).id() == compression::CodecId::fp32);
  CHECK(pull() == compression::CodecId::fp32);
  CHECK(same_bits(held, shard.values()));
  // Round 2 (int8): the change since round 1's values, kept although round 1 sent fp32.
  shard.apply_push(0, 2, gaussian(n, 2), live);
  CHECK_FALSE(shard.pull_sends_values(0, false));
  CHECK(pull() == compression::CodecId::int8);
  const std::vector<float> residual(shard.downlink_residual(0).begin(),
                                    shard.downlink_residual(0).end());
  REQUIRE(residual.size() == n);
  const std::vector<float> sent(shard.values().begin(), shard.values().end());
  // Round 3 (onebit): the reference order with int8's residual, x = (values - sent) + e.
  shard.apply_push(0, 3, gaussian(n, 3), live);
  CHECK(shard.downlink_codec(0).id() == compression::CodecId::onebit);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = (shard.values()[i] - sent[i]) + residual[i];
  Bytes expected;
  compression::make_codec("onebit")->encode(x, expected);
  CHECK(shard.pull_copy(0, false) == expected);
  // Region 1 was not pushing: its codec is its own schedule's, int8, whatever its round.
  CHECK(shard.downlink_codec(1).id() == compression::CodecId::int8);
}

TEST_CASE(
    "the payload pool gives a sent buffer back once ZeroMQ frees its frame, and frames may outlive "
    "the pool") {
  server::PayloadPool pool(2);
  Bytes a = pool.acquire(1000);
  CHECK(a.size() == 1000);
  const std::byte* where = a.data();
  {
    auto frame = pool.frame(std::move(a));
    CHECK(frame.size() == 1000);
    CHECK(frame.data() == where);  // no copy
    CHECK(pool.idle() == 0);
  }
  CHECK(pool.idle() == 1);
  Bytes again = pool.acquire(1000);
  CHECK(again.data() == where);  // reused, not reallocated
  CHECK(pool.idle() == 0);
  // At most max_idle buffers wait; more are freed when they come back.
  {
    auto f1 = pool.frame(pool.acquire(10));
    auto f2 = pool.frame(pool.acquire(20));
    auto f3 = pool.frame(std::move(again));
  }
  CHECK(pool.idle() == 2);
  // A buffer of another size is resized from an idle one.
  CHECK(pool.acquire(4096).size() == 4096);
  wire::Frame late;
  {
    server::PayloadPool short_lived;
    late = short_lived.frame(short_lived.acquire(64));
  }
  CHECK(late.size() == 64);  // freed after its pool is gone: no crash, no leak (ASan builds)
}

TEST_CASE(
    "a value buffer is filled block by block and sealed as an fp32 payload, on one thread or two, "
    "with its header at once or on first send") {
  for (size_t n : {size_t{0}, size_t{1000}, 3 * server::ValueBuffer::kFillBlock + 5,
                   server::kSplitElements + 12345}) {
    CAPTURE(n);
    server::ValueBufferPool pool(n);
    server::PassSplitter splitter;
    for (auto* split : {static_cast<server::PassSplitter*>(nullptr), &splitter}) {
      for (bool header : {true, false}) {
        CAPTURE(header);
        auto b = pool.acquire();
        CHECK(b->size() == n);
        CHECK(reinterpret_cast<uintptr_t>(b->values().data()) % 64 == 0);
        CHECK_FALSE(b->sealed());
        std::vector<std::pair<size_t, size_t>> calls;
        std::mutex calls_mutex;
        b->fill(
            [&](size_t begin, FloatSpan block) {
              for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<float>(begin + i);
              std::lock_guard lock(calls_mutex);
              calls.emplace_back(begin, block.size());
            },
            split, header);
        CHECK(b->sealed());
        CHECK(b->has_header() == header);
        // Every value written exactly once, by blocks that tile the buffer.
        std::sort(calls.begin(), calls.end());
        size_t at = 0;
        for (const auto& [begin, count] : calls) {
          CHECK(begin == at);
          at += count;
        }
        CHECK(at == n);
        const bool was_split = split != nullptr && n >= server::kSplitElements;
        CHECK(calls.size() == (was_split ? n / 2 / server::ValueBuffer::kFillBlock + 1
                                         : (n + server::ValueBuffer::kFillBlock - 1) /
                                               server::ValueBuffer::kFillBlock));
        const auto payload = b->payload_for_send();
        CHECK(b->has_header());
        CHECK(payload.data() == b->payload().data());
        CHECK(payload.size() == compression::kHeaderBytes + 4 * n);
        CHECK(payload.data() + compression::kHeaderBytes ==
              reinterpret_cast<const std::byte*>(b->values().data()));
        std::vector<float> decoded(n);
        compression::decode_payload(payload, decoded);  // checksum and all
        for (size_t i = 0; i < n; ++i) REQUIRE(decoded[i] == static_cast<float>(i));
      }
    }
  }
}

TEST_CASE(
    "the value buffer pool reuses a buffer once nothing holds it, frames included, and frames may "
    "outlive the pool") {
  server::ValueBufferPool pool(1000, 1);
  auto fill = [](server::ValueBuffer& b, float x) {
    b.fill([x](size_t, FloatSpan block) { std::fill(block.begin(), block.end(), x); });
  };
  auto a = pool.acquire();
  fill(*a, 2.5f);
  const auto payload = a->payload();
  const float* where = a->values().data();
  {
    auto frame = server::ValueBufferPool::frame(a);
    CHECK(frame.data() == payload.data());  // no copy
    CHECK(frame.size() == payload.size());
    a.reset();
    CHECK(pool.idle() == 0);  // the frame still holds it
  }
  CHECK(pool.idle() == 1);
  auto again = pool.acquire();
  CHECK(again->values().data() == where);
  CHECK_FALSE(again->sealed());  // a new version: to be filled again
  fill(*again, 1.0f);
  auto other = pool.acquire();
  CHECK(other->values().data() != where);
  again.reset();
  other.reset();
  CHECK(pool.idle() == 1);  // at most max_idle wait
  wire::Frame late;
  {
    server::ValueBufferPool short_lived(16);
    auto b = short_lived.acquire();
    fill(*b, 0.0f);
    late = server::ValueBufferPool::frame(std::move(b));
  }
  CHECK(late.size() == compression::kHeaderBytes + 64);  // no crash, no leak (ASan builds)
}

TEST_CASE(
    "a push whose fp32 payload is not float-aligned in memory is applied like an aligned one") {
  TempDir tmp("unaligned");
  Cluster cluster(small_config(tmp.path(), 1, kOnlyRegistered));
  auto a = cluster.client();
  hello(a, "a", cluster.table_hash());
  std::vector<float> delta(kShard);
  for (size_t i = 0; i < kShard; ++i) delta[i] = static_cast<float>(i % 13) - 6.0f;
  const Bytes payload = encode(delta);
  // Over inproc the server reads the sender's buffer: place the payload at an odd address.
  Bytes storage(payload.size() + 1);
  std::memcpy(storage.data() + 1, payload.data(), payload.size());
  std::vector<wire::Frame> f;
  f.push_back(wire::Frame::borrowed({storage.data() + 1, payload.size()}));
  as<wire::PushReply>(expect_reply(a, push_header(0, 1, 0, payload), std::move(f)));
  auto p = pull(a, true, 0, 1);
  for (size_t i = 0; i < kShard; ++i)
    REQUIRE(p.values[i] == delta[i]);  // one live region: the delta itself
}

TEST_CASE(
    "a NaN far into a large fp32 push is found by the checking pass and the push changes nothing") {
  TempDir tmp("large-nan");
  const size_t n = 5 * compression::kChecksumBlock / sizeof(float) + 3;  // several checksum blocks
  auto config = server::parse_server_config(fmt::format(R"(
regions: [a]
model:
  tensors: [{{name: w, size: {}}}]
server:
  run_dir: "{}"
)",
                                                        n, tmp.path().string()));
  Cluster cluster(config);
  auto a = cluster.client();
  hello(a, "a", cluster.table_hash());
  auto delta = filled(n, 0.25f);
  delta[n - 2] = std::numeric_limits<float>::infinity();
  const Bytes bad = encode(delta);
  auto r = expect_reply(a, push_header(0, 1, 0, bad), frames(bad));
  REQUIRE(std::holds_alternative<wire::Error>(r.header.body));
  CHECK(std::get<wire::Error>(r.header.body).code == wire::ErrorCode::bad_payload);
  CHECK(pull(a, true, 0, 0, n).values == filled(n, 0.0f));
  delta[n - 2] = 0.25f;
  CHECK(push(a, 1, delta).round == 1);
  CHECK(pull(a, true, 0, 1, n).values == filled(n, 0.25f));
}

TEST_CASE(
    "shard buffers of 2 MiB and more are 2 MiB-aligned and zero-initialised like any vector") {
  server::ShardBuffer big(server::kHugePage / sizeof(float) + 5, 0.0f), small(100, 1.0f);
  CHECK(reinterpret_cast<uintptr_t>(big.data()) % server::kHugePage == 0);
  CHECK(std::all_of(big.begin(), big.end(), [](float x) { return x == 0.0f; }));
  CHECK(std::all_of(small.begin(), small.end(), [](float x) { return x == 1.0f; }));
  auto copy = big;
  copy.back() = 3.0f;
  CHECK(big.back() == 0.0f);
}

TEST_CASE("the pass splitter runs each task on its thread and wait() returns once it is done") {
  server::PassSplitter splitter;
  splitter.wait();  // nothing started: returns at once
  std::vector<int> hits(8, 0);
  for (int t = 0; t < 8; ++t) {
    const auto caller = std::this_thread::get_id();
    std::thread::id ran_on;
    splitter.start([&, t] {
      ran_on = std::this_thread::get_id();
      hits[t] = t + 1;
    });
    splitter.wait();
    CHECK(ran_on != caller);
    CHECK(hits[t] == t + 1);
  }
}

TEST_CASE("a large shard's push split over two threads gives the bytes of one thread") {
  const size_t n =
      server::kSplitElements + 12345;  // large enough to split, halves of unequal blocks
  for (const char* downlink : {"fp32", "int8"}) {
    CAPTURE(downlink);
    server::ShardSettings settings;
    settings.optimizer = {0.7f, 0.9f, true};
    settings.downlink_codec = downlink;
    std::vector<uint8_t> mask(n, 0);
    for (size_t i = 0; i < n; i += 5) mask[i] = 1;  // some critical elements: the masked step
    server::Shard one(server::ShardRange{0, 0, n, 0}, mask, 1, settings);
    server::Shard two(server::ShardRange{0, 0, n, 0}, mask, 1, settings);
    server::PassSplitter splitter;
    two.set_splitter(&splitter);
    const std::vector<bool> live{true};
    REQUIRE(one.pull_copy(0, true) == two.pull_copy(0, true));
    for (uint64_t t = 1; t <= 3; ++t) {
      const auto delta = gaussian(n, static_cast<unsigned>(t));
      one.apply_push(0, t, delta, live);
      two.apply_push(0, t, delta, live);
      REQUIRE(same_bits(one.values(), two.values()));
      one.release_ready(live);
      two.release_ready(live);
      REQUIRE(same_bits(one.values(), two.values()));
      REQUIRE(same_bits(one.momentum(), two.momentum()));
      REQUIRE(one.pull_copy(0, false) == two.pull_copy(0, false));
    }
  }
}

TEST_CASE(
    "a staged push computed on the splitter's thread commits the bytes of apply_push, and a "
    "dropped one leaves the shard as it was") {
  const size_t n = server::kSplitElements + 12345;
  for (bool critical : {false, true}) {
    CAPTURE(critical);
    server::ShardSettings settings;
    settings.optimizer = {0.7f, 0.9f, true};
    std::vector<uint8_t> mask(n, 0);
    if (critical)
      for (size_t i = 0; i < n; i += 5) mask[i] = 1;
    server::Shard reference(server::ShardRange{0, 0, n, 0}, mask, 2, settings);
    server::Shard staged(server::ShardRange{0, 0, n, 0}, mask, 2, settings);
    server::PassSplitter splitter;
    staged.set_splitter(&splitter);
    const std::vector<bool> live{true, true};
    for (uint64_t t = 1; t <= 3; ++t) {
      for (size_t region = 0; region < 2; ++region) {
        const auto delta = gaussian(n, static_cast<unsigned>(10 * t + region));
        // A push dropped before its commit first: nothing of it may remain.
        {
          const auto noise = gaussian(n, 99);
          auto dropped = staged.start_push(region, t, noise, live);
          CHECK(dropped.result().staleness == 0);
        }
        CHECK(staged.gate().clock(region) == t - 1);
        REQUIRE(same_bits(staged.values(), reference.values()));
        REQUIRE(same_bits(staged.momentum(), reference.momentum()));
        const auto expected = reference.apply_push(region, t, delta, live);
        auto push = staged.start_push(region, t, delta, live);
        const auto got = push.commit();
        CHECK(got.staleness == expected.staleness);
        CHECK(got.weight == expected.weight);
        CHECK(staged.version() == reference.version());
        REQUIRE(same_bits(staged.values(), reference.values()));
        REQUIRE(same_bits(staged.momentum(), reference.momentum()));
      }
      CHECK(staged.release_ready(live).size() == reference.release_ready(live).size());
      REQUIRE(same_bits(staged.values(), reference.values()));
      REQUIRE(staged.pull_copy(0, true) == reference.pull_copy(0, true));
    }
  }
}
