// PassSplitter: runs part of a pass over a large shard on a second thread while the caller runs
// the rest, for the passes that are split by range (the optimizer step, the downlink diff).
//
// Why: a push or pull of a shard of many MiB is a few memory-bound passes on the server's loop
// thread, and while they run ZeroMQ's I/O thread has nothing to do (a leader has one request per
// shard in flight), so a second core sits idle. Splitting a pass in two halves uses it.
//
// Owns one helper thread (started in the constructor, joined in the destructor). start() hands it
// a task, wait() blocks until that task has finished; one task at a time, from one thread (the
// server's loop). The task and the caller must work on disjoint memory. Tasks must not throw.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace geotrain::server {

class PassSplitter {
 public:
  PassSplitter();
  ~PassSplitter();
  PassSplitter(const PassSplitter&) = delete;
  PassSplitter& operator=(const PassSplitter&) = delete;

  // Runs `task` on the helper thread; call wait() before the next start().
  void start(std::function<void()> task);
  // Returns once the task given to start() has finished (at once when there is none).
  void wait();

 private:
  void loop(std::stop_token stop);

  std::mutex mutex_;
  std::condition_variable_any wake_;
  std::condition_variable done_cv_;
  std::function<void()> task_;
  bool busy_ = false;
  std::jthread thread_;  // last: started after, and joined before, the members above
};

// Runs `task` on the splitter's thread for as long as the object lives: the destructor waits for
// it, also while an exception unwinds the caller (whose stack the task may use). A null splitter
// runs nothing.
class SplitTask {
 public:
  SplitTask(PassSplitter* splitter, std::function<void()> task) : splitter_(splitter) {
    if (splitter_) splitter_->start(std::move(task));
  }
  ~SplitTask() { wait(); }
  // Waits for the task now (once; later calls and the destructor return at once).
  void wait() {
    if (splitter_) splitter_->wait();
    splitter_ = nullptr;
  }
  SplitTask(const SplitTask&) = delete;
  SplitTask& operator=(const SplitTask&) = delete;

 private:
  PassSplitter* splitter_;
};

// Passes over fewer elements than this stay on one thread: waking the helper costs tens of
// microseconds, about what a pass over a few MiB saves.
inline constexpr size_t kSplitElements = size_t{1} << 20;  // 4 MiB of fp32

}  // namespace geotrain::server
