#include "worker/run/snapshot_writer.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <exception>

namespace geotrain::worker {

SnapshotWriter::~SnapshotWriter() {
  try {
    collect(true);
  } catch (const std::exception& e) {
    spdlog::error("worker snapshot: the last write failed: {}", e.what());
  }
}

void SnapshotWriter::collect(bool block) {
  if (!in_flight_.valid()) return;
  if (!block && in_flight_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
  written_.push_back(in_flight_.get());  // rethrows the write's error
}

void SnapshotWriter::submit(WorkerCheckpointState state) {
  collect(true);
  in_flight_ = std::async(std::launch::async, [this, s = std::move(state)] {
    return Written{s.round, store_.write(s)};
  });
}

void SnapshotWriter::wait() { collect(true); }

std::vector<SnapshotWriter::Written> SnapshotWriter::written() {
  collect(false);
  return std::exchange(written_, {});
}

}  // namespace geotrain::worker
