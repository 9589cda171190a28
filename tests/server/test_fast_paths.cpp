// The server's fused passes and buffer reuse (server/shard_kernels.hpp, outer_optimizer.hpp,
// payload_pool.hpp, pass_splitter.hpp, Shard::pull_change's fp32 path) against the unfused or
// single-threaded reference they replace: equal bit for bit, not within a tolerance.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include "compression/error_feedback.hpp"
#include "compression/factory.hpp"
#include "server/huge_pages.hpp"
#include "server/outer_optimizer.hpp"
#include "server/pass_splitter.hpp"
#include "server/payload_pool.hpp"
#include "server/shard.hpp"
#include "server/shard_kernels.hpp"
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
  for (const auto& config : {server::OuterOptimizerConfig{1.0f, 0.0f, false},
                             server::OuterOptimizerConfig{0.7f, 0.9f, false},
                             server::OuterOptimizerConfig{0.7f, 0.9f, true}}) {
    for (bool masked : {false, true}) {
      CAPTURE(config.describe());
      CAPTURE(masked);
      auto theta = gaussian(n, 2), m = gaussian(n, 3);
      auto ref_theta = theta, ref_m = m;
      const auto& sel = masked ? mask : std::vector<uint8_t>();
      server::outer_step(config, theta, m, delta, sel, 0, {1.0f / 3.0f, 2.0f});
      reference_step(config, ref_theta, ref_m, delta, sel, 0, 1.0f / 3.0f, 2.0f);
      CHECK(same_bits(theta, ref_theta));
      CHECK(same_bits(m, ref_m));
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
  std::vector<float> g(1000), g_fp32(1000);
  auto sent2 = sent;
  server::take_change(values, sent, g);
  server::take_change_fp32(values, sent2, g_fp32);
  for (size_t i = 0; i < 1000; ++i) REQUIRE(g[i] == values[i] - before[i]);
  CHECK(same_bits(sent, values));
  CHECK(same_bits(sent2, values));
  CHECK(same_bits(g, g_fp32));
  // The one difference: a change of -0 leaves the fp32 path as +0, as x = g + e with e = +0 does.
  std::vector<float> v{-0.0f}, s{0.0f}, out(1);
  server::take_change_fp32(v, s, out);
  CHECK_FALSE(std::signbit(out[0]));
}

TEST_CASE(
    "the fp32 downlink's one-pass path sends the bytes and keeps the residual of the "
    "error-feedback reference") {
  const size_t n = 70000;          // more than one checksum block, and not a multiple of one
  server::ShardSettings settings;  // fp32 downlink
  server::Shard shard(server::ShardRange{0, 0, n, 0}, std::vector<uint8_t>(n, 0), 2, settings);
  const std::vector<bool> live{true, true};
  // The reference: the values last sent, and the error feedback's reference (unfused) order.
  compression::ErrorFeedback reference(compression::make_codec("fp32"), false);
  std::vector<float> sent(shard.values().begin(), shard.values().end()), g(n);
  shard.pull_full(1);
  Bytes out;
  uint64_t round = 0;
  for (int pull = 1; pull <= 4; ++pull) {
    CAPTURE(pull);
    if (pull != 3) {  // no push before the third pull: a pull of no change
      ++round;
      for (size_t region = 0; region < 2; ++region) {
        auto delta = gaussian(n, static_cast<unsigned>(10 * round + region));
        for (size_t i = 0; i < n; i += 7) delta[i] = 0.0f;
        shard.apply_push(region, round, delta, live);
      }
    }
    shard.pull_change(1, out);
    for (size_t i = 0; i < n; ++i) g[i] = shard.values()[i] - sent[i];
    Bytes expected;
    reference.encode(1, g, expected);
    std::copy(shard.values().begin(), shard.values().end(), sent.begin());
    REQUIRE(out == expected);
    CHECK(same_bits(shard.downlink_residual(1), reference.residual(1)));
    CHECK(shard.sent_version(1) == shard.version());
  }
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
  zmq::message_t late;
  {
    server::PayloadPool short_lived;
    late = short_lived.frame(short_lived.acquire(64));
  }
  CHECK(late.size() == 64);  // freed after its pool is gone: no crash, no leak (ASan builds)
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
  std::vector<zmq::message_t> f;
  f.emplace_back(storage.data() + 1, payload.size(), nullptr, nullptr);
  as<wire::PushReply>(expect_reply(a, push_header(0, 1, 0, payload, kShard), std::move(f)));
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
  auto r = expect_reply(a, push_header(0, 1, 0, bad, n), frames(bad));
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

TEST_CASE("a large shard's push and pull split over two threads give the bytes of one thread") {
  const size_t n =
      server::kSplitElements + 12345;  // large enough to split, halves of unequal blocks
  server::ShardSettings settings;
  settings.optimizer = {0.7f, 0.9f, true};
  std::vector<uint8_t> mask(n, 0);
  for (size_t i = 0; i < n; i += 5) mask[i] = 1;  // some critical elements: the masked step
  server::Shard one(server::ShardRange{0, 0, n, 0}, mask, 1, settings);
  server::Shard two(server::ShardRange{0, 0, n, 0}, mask, 1, settings);
  server::PassSplitter splitter;
  two.set_splitter(&splitter);
  const std::vector<bool> live{true};
  one.pull_full(0);
  two.pull_full(0);
  Bytes a, b;
  for (uint64_t t = 1; t <= 3; ++t) {
    const auto delta = gaussian(n, static_cast<unsigned>(t));
    one.apply_push(0, t, delta, live);
    two.apply_push(0, t, delta, live);
    one.release_ready(live);
    two.release_ready(live);
    REQUIRE(same_bits(one.values(), two.values()));
    REQUIRE(same_bits(one.momentum(), two.momentum()));
    one.pull_change(0, a);
    two.pull_change(0, b);
    REQUIRE(a == b);
  }
}
