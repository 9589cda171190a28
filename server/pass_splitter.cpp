#include "server/pass_splitter.hpp"

#include "core/error.hpp"

namespace geotrain::server {

PassSplitter::PassSplitter() : thread_([this](std::stop_token stop) { loop(stop); }) {}

PassSplitter::~PassSplitter() {
  wait();
  thread_.request_stop();  // wakes loop() through the stop token of wake_.wait
}

void PassSplitter::start(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    GT_ASSERT(!busy_, "PassSplitter::start while a task runs: call wait() first");
    task_ = std::move(task);
    busy_ = true;
  }
  wake_.notify_one();
}

void PassSplitter::wait() {
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [&] { return !busy_; });
}

void PassSplitter::loop(std::stop_token stop) {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (!wake_.wait(lock, stop, [&] { return static_cast<bool>(task_); }))
      return;  // stop requested
    auto task = std::move(task_);
    task_ = nullptr;
    lock.unlock();
    task();
    lock.lock();
    busy_ = false;
    done_cv_.notify_all();
  }
}

}  // namespace geotrain::server
