// SnapshotWriter: writes a worker's snapshots (WorkerCheckpointStore::write) on a thread of its
// own, so that training goes on while a large model's state reaches the disk. GPT-2 124M with
// AdamW holds 1.5 GB a snapshot; written in the round's path, three such workers sharing a
// machine spent 6-7 s of every 16 s round on it (docs/benchmarks.md, "GPT on a GPU").
//
// At most one write is in flight: submit() waits for the previous one first, so memory holds at
// most two states (the one being written and the one just captured), and snapshots reach the disk
// in round order. A snapshot is durable when its write has returned (the store's temp folder,
// fsync and rename); until then the previous one is what a restart finds. written() hands the
// snapshots written since its last call to the caller's thread, which logs them (MetricsLog is
// single-threaded). A write that fails is rethrown by the next submit(), wait() or written(); the
// destructor waits for the write in flight and logs a failure instead.
#pragma once

#include <cstdint>
#include <filesystem>
#include <future>
#include <utility>
#include <vector>

#include "worker/run/worker_checkpoint.hpp"

namespace geotrain::worker {

class SnapshotWriter {
 public:
  // `store` must outlive the writer.
  explicit SnapshotWriter(const WorkerCheckpointStore& store) : store_(store) {}
  ~SnapshotWriter();
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  // Starts writing `state` once the write in flight, if any, has finished.
  void submit(WorkerCheckpointState state);
  // Waits for the write in flight.
  void wait();

  struct Written {
    uint64_t round = 0;
    std::filesystem::path folder;
  };
  // The snapshots written since the last call, oldest first; does not wait.
  std::vector<Written> written();

 private:
  // The write in flight, once finished (`block`: waiting for it), into written_.
  void collect(bool block);

  const WorkerCheckpointStore& store_;
  std::future<Written> in_flight_;
  std::vector<Written> written_;
};

}  // namespace geotrain::worker
