// How long an exchange that may defer waits for a server (worker/leader/shard_wait.hpp): a fixed
// worker.shard_wait_ms, or `auto`, twice the 90th percentile of the region's recent healthy
// exchanges within [200 ms, the ceiling]; and how the config reads it.
#include <doctest/doctest.h>

#include <chrono>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "worker/config.hpp"
#include "worker/leader/shard_wait.hpp"

using namespace geotrain;
using namespace std::chrono_literals;
using worker::ShardWait;

TEST_CASE("a fixed shard wait stays what the config says") {
  ShardWait fixed(700ms, false, 10s);
  for (int i = 0; i < 100; ++i) fixed.healthy_exchange(0.1);
  CHECK(fixed.current() == 700ms);
}

TEST_CASE("shard_wait_ms: auto follows twice the 90th percentile of the healthy exchanges") {
  ShardWait wait(1000ms, true, 5s);
  // Until kWarmup exchanges were seen: the start value.
  for (size_t i = 0; i + 1 < ShardWait::kWarmup; ++i) wait.healthy_exchange(0.2);
  CHECK(wait.current() == 1000ms);
  // 0.20 s x 7, then 0.26 s: the 90th percentile of 8 is the 8th smallest (0.26 s).
  wait.healthy_exchange(0.26);
  CHECK(wait.current() == 520ms);
  // One slow exchange in 64 (2 s) is past the 90th percentile: it does not move the wait.
  ShardWait steady(1000ms, true, 5s);
  for (int i = 0; i < 63; ++i) steady.healthy_exchange(0.25);
  steady.healthy_exchange(2.0);
  CHECK(steady.current() == 500ms);
  // The window is the last 64: a fleet that slowed down (rounds of 0.6 s) gets a longer wait.
  for (size_t i = 0; i < ShardWait::kWindow; ++i) steady.healthy_exchange(0.6);
  CHECK(steady.current() == 1200ms);
  // Bounds: at least kFloor, at most the ceiling; nonsense samples are ignored.
  ShardWait quick(1000ms, true, 5s);
  for (int i = 0; i < 10; ++i) quick.healthy_exchange(0.001);
  CHECK(quick.current() == ShardWait::kFloor);
  quick.healthy_exchange(-1.0);
  quick.healthy_exchange(std::numeric_limits<double>::quiet_NaN());
  CHECK(quick.current() == ShardWait::kFloor);
  ShardWait slow(1000ms, true, 3s);
  for (int i = 0; i < 10; ++i) slow.healthy_exchange(30.0);
  CHECK(slow.current() == 3s);
}

TEST_CASE("worker.shard_wait_ms is read in milliseconds and stays below timeout_ms") {
  using worker::parse_worker_config;
  const std::string base = "regions: [a]\nmodel: {arch: \"4-3\"}\n";
  CHECK(parse_worker_config(base, "t.yaml").shard_wait == 0ms);
  CHECK(parse_worker_config(base + "worker: {overlap: eager, shard_wait_ms: 1000}\n", "t.yaml")
            .shard_wait == 1000ms);
  CHECK(parse_worker_config(base + "worker: {shard_wait_ms: 0}\n", "t.yaml").shard_wait == 0ms);
  // Blocking exchanges never defer, but keep the key: a sweep's base config serves both kinds.
  CHECK(parse_worker_config(base + "worker: {shard_wait_ms: 1000}\n", "t.yaml").shard_wait ==
        1000ms);
  CHECK_THROWS_WITH_AS(
      parse_worker_config(
          base + "worker: {overlap: eager, timeout_ms: 2000, shard_wait_ms: 2000}\n", "t.yaml"),
      doctest::Contains("must be below worker.timeout_ms = 2000"), InputError);
  CHECK_THROWS_WITH_AS(
      parse_worker_config(base + "worker: {overlap: eager, shard_wait_ms: -1}\n", "t.yaml"),
      doctest::Contains("worker.shard_wait_ms"), InputError);
  // auto: the wait adapts, from 1000 ms (half the timeout when that is shorter).
  const auto automatic =
      parse_worker_config(base + "worker: {overlap: eager, shard_wait_ms: auto}\n", "t.yaml");
  CHECK(automatic.shard_wait_auto);
  CHECK(automatic.shard_wait == 1000ms);
  CHECK(parse_worker_config(
            base + "worker: {overlap: eager, timeout_ms: 600, shard_wait_ms: auto}\n", "t.yaml")
            .shard_wait == 300ms);
  CHECK_FALSE(
      parse_worker_config(base + "worker: {shard_wait_ms: 400}\n", "t.yaml").shard_wait_auto);
  CHECK_THROWS_WITH_AS(
      parse_worker_config(base + "worker: {overlap: eager, shard_wait_ms: automatic}\n", "t.yaml"),
      doctest::Contains("worker.shard_wait_ms"), InputError);
}
