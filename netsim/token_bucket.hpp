// TokenBucket: the bandwidth of one link lane, shared by all of its connections.
//
// Reservation-based (a virtual clock): reserve(n, now) returns the time at which n bytes may
// leave, given every earlier reservation, so chunks are released first come, first served at
// the configured rate after an initial burst of up to `burst` bytes. Reservations may lie in the
// future; the bucket never blocks. Not thread-safe: owned by the proxy's event-loop thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>

#include "core/error.hpp"

namespace geotrain::netsim {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;

  // rate in bytes/s (> 0), burst in bytes (> 0). The bucket starts full at `now`.
  TokenBucket(double rate_bytes_per_s, double burst_bytes, Clock::time_point now)
      : rate_(rate_bytes_per_s), burst_(burst_bytes), tokens_(burst_bytes), last_(now) {
    GT_ASSERT(rate_ > 0 && burst_ > 0, "rate {} burst {}", rate_, burst_);
  }

  // Earliest time >= now at which `bytes` may be released; accounts them as sent.
  Clock::time_point reserve(std::size_t bytes, Clock::time_point now) {
    refill(now);
    const double need = std::min(static_cast<double>(bytes), burst_);
    if (tokens_ < need) {
      const double wait_s = (need - tokens_) / rate_;
      last_ += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s));
      tokens_ = need;
    }
    tokens_ -= static_cast<double>(bytes);  // may go negative for bytes > burst: paid back later
    return last_;
  }

  // Changes rate and burst from `now` on; earlier reservations keep their times.
  void set_rate(double rate_bytes_per_s, double burst_bytes, Clock::time_point now) {
    GT_ASSERT(rate_bytes_per_s > 0 && burst_bytes > 0, "rate {} burst {}", rate_bytes_per_s,
              burst_bytes);
    refill(now);
    rate_ = rate_bytes_per_s;
    burst_ = burst_bytes;
    tokens_ = std::min(tokens_, burst_);
  }

  // The lane sends nothing in [from, until): reservations still ahead at `from` move back by the
  // pause, new ones start at `until` at the earliest, and no tokens accrue meanwhile.
  void pause(Clock::time_point from, Clock::time_point until) {
    if (until <= from) return;
    refill(from);
    last_ = std::max(last_, from) + (until - from);
  }

  double rate() const { return rate_; }

 private:
  void refill(Clock::time_point now) {
    if (now <= last_) return;  // reservations already run ahead of now
    tokens_ =
        std::min(burst_, tokens_ + rate_ * std::chrono::duration<double>(now - last_).count());
    last_ = now;
  }

  double rate_;
  double burst_;
  double tokens_;
  Clock::time_point last_;
};

}  // namespace geotrain::netsim
