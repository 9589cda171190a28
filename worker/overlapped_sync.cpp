#include "worker/overlapped_sync.hpp"

#include <utility>

#include "core/error.hpp"

namespace geotrain::worker {

OverlappedSync::OverlappedSync(RegionSync& sync) : sync_(sync) {
  thread_ = std::jthread([this](std::stop_token stop) { loop(stop); });
}

OverlappedSync::~OverlappedSync() {
  thread_.request_stop();
  wake_.notify_all();
}

bool OverlappedSync::in_flight() const {
  std::lock_guard lock(mutex_);
  return pending_;
}

void OverlappedSync::loop(std::stop_token stop) {
  std::unique_lock lock(mutex_);
  while (!stop.stop_requested()) {
    // Idle: wake for work, or every heartbeat interval to keep the servers from declaring us dead.
    wake_.wait_for(lock, stop, sync_.config().heartbeat, [&] { return working_; });
    if (stop.stop_requested()) break;
    if (!working_) {
      lock.unlock();
      try {
        sync_.keep_alive();
      } catch (...) {
        // A failed heartbeat is reported by the next exchange, which talks to the same servers.
      }
      lock.lock();
      continue;
    }
    lock.unlock();
    std::optional<RoundReport> report;
    std::exception_ptr error;
    try {
      report = sync_.exchange(snapshot_);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    result_ = report;
    error_ = error;
    working_ = false;
    wake_.notify_all();
  }
}

RoundReport OverlappedSync::wait_and_merge(FloatSpan local) {
  std::unique_lock lock(mutex_);
  wake_.wait(lock, [&] { return !working_; });
  pending_ = false;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  GT_ASSERT(result_.has_value(), "exchange finished without a result");
  const RoundReport report = *result_;
  result_.reset();
  lock.unlock();
  // local = base_new + (local - snapshot): the global step, plus our progress since the snapshot.
  const ConstFloatSpan base = sync_.base();
  GT_REQUIRE(local.size() == base.size(), "overlapped sync: {} local parameters, the table has {}",
             local.size(), base.size());
  for (size_t i = 0; i < local.size(); ++i) local[i] = base[i] + (local[i] - snapshot_[i]);
  return report;
}

std::optional<RoundReport> OverlappedSync::step(FloatSpan local) {
  std::optional<RoundReport> merged;
  if (in_flight()) merged = wait_and_merge(local);
  std::lock_guard lock(mutex_);
  snapshot_.assign(local.begin(), local.end());
  pending_ = true;
  working_ = true;
  wake_.notify_all();
  return merged;
}

std::optional<RoundReport> OverlappedSync::finish(FloatSpan local) {
  if (!in_flight()) return std::nullopt;
  return wait_and_merge(local);
}

}  // namespace geotrain::worker
