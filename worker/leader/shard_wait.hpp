// ShardWait: how long an exchange that may defer waits for a server before it defers that
// server's shards (worker.shard_wait_ms; docs/training.md, "Deferred shards"). Fixed, or
// adaptive (`shard_wait_ms: auto`): kMultiple times the 90th percentile of the region's last
// kWindow exchanges that deferred nothing (from their first push to their last reply), within
// [kFloor, the ceiling]; the configured start value until kWarmup such exchanges have been seen.
// A healthy overlapped exchange lasts about a round (each pull waits for every region's push of
// its round), so a server that stopped, was cut off or restarted is given up on after about two
// rounds rather than after a fixed second, and a fleet whose rounds are slow (a long link, a slow
// region) is not deferred from for being slow.
//
// Not thread-safe: RegionSync's thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>

namespace geotrain::worker {

class ShardWait {
 public:
  static constexpr size_t kWindow = 64;
  static constexpr size_t kWarmup = 8;
  static constexpr double kMultiple = 2.0;
  // A CPU hiccup on a loaded host lasts up to a few hundred ms: no wait shorter than that.
  static constexpr std::chrono::milliseconds kFloor{200};

  // `configured`: the fixed wait, or, adaptive, the wait until kWarmup exchanges were seen;
  // `ceiling`: the longest an adaptive wait may be (below the reply timeout).
  ShardWait(std::chrono::milliseconds configured, bool adaptive, std::chrono::milliseconds ceiling);

  // The wait for the next exchange.
  std::chrono::milliseconds current() const { return current_; }
  bool adaptive() const { return adaptive_; }
  // An exchange that may defer took `seconds` (first push to last reply) and deferred nothing:
  // a sample of a healthy exchange. Exchanges that deferred say nothing of a healthy one.
  void healthy_exchange(double seconds);

 private:
  std::chrono::milliseconds ceiling_, current_;
  bool adaptive_;
  std::deque<double> recent_;
};

}  // namespace geotrain::worker
