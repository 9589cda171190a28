// OverlappedSync: runs RegionSync::exchange in a background thread, so that workers compute
// round t+1 while round t crosses the WAN; the result is merged one round late. This is what
// hides WAN latency (DESIGN.md, "One round": overlap).
//
// At each round boundary the leader calls step(local):
//   1. if an exchange is in flight, wait for it, then merge its result into local, keeping the
//      progress made since that exchange's snapshot:  local = base_new + (local - snapshot);
//   2. snapshot local and start its exchange in the background; return at once.
// With overlap off the leader calls RegionSync::exchange directly instead.
//
// Owns a thread (joined on destruction) and the snapshot. The RegionSync is borrowed and must
// be used by nobody else while this object lives: the background thread is its only user, and
// keeps the servers' heartbeats going while idle. step() and finish() are for one caller thread.
// An exception in the background exchange is rethrown by the next step() or finish().
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "worker/region_sync.hpp"

namespace geotrain::worker {

class OverlappedSync {
 public:
  explicit OverlappedSync(RegionSync& sync);
  ~OverlappedSync();
  OverlappedSync(const OverlappedSync&) = delete;
  OverlappedSync& operator=(const OverlappedSync&) = delete;

  // The round boundary: merges the finished exchange (if any) into `local`, then starts the
  // next one from `local`. Returns the report of the exchange it merged, if there was one.
  std::optional<RoundReport> step(FloatSpan local);

  // Waits for the exchange in flight and merges it into `local` (the end of training).
  std::optional<RoundReport> finish(FloatSpan local);

  bool in_flight() const;

 private:
  void loop(std::stop_token stop);
  RoundReport wait_and_merge(FloatSpan local);

  RegionSync& sync_;
  std::vector<float> snapshot_;
  mutable std::mutex mutex_;
  std::condition_variable_any wake_;
  bool pending_ = false;  // an exchange was started and its result not yet taken
  bool working_ = false;  // the thread should run the exchange
  std::optional<RoundReport> result_;
  std::exception_ptr error_;
  std::jthread thread_;
};

}  // namespace geotrain::worker
