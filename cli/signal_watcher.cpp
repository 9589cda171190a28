#include "cli/signal_watcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"

namespace geotrain::cli {
namespace {

std::atomic<int> g_signal_pipe{-1};  // see the header: the handler's only way out

extern "C" void on_signal_handler(int sig) {
  const int saved = errno;
  const int fd = g_signal_pipe.load();
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(sig);
    [[maybe_unused]] ssize_t n = write(fd, &byte, 1);
  }
  errno = saved;
}

}  // namespace

SignalWatcher::SignalWatcher(std::function<void(int)> on_signal,
                             std::optional<std::chrono::milliseconds> orphan_grace)
    : orphan_grace_(orphan_grace), parent_(::getppid()) {
  GT_ASSERT(g_signal_pipe.load() < 0, "only one SignalWatcher may exist at a time");
  if (pipe2(pipe_, O_CLOEXEC) != 0)
    throw SystemError("posix", "pipe2", __FILE__, __LINE__, std::strerror(errno));
  g_signal_pipe.store(pipe_[1]);
  struct sigaction sa {};
  sa.sa_handler = on_signal_handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A write to a peer that closed its end (a Gloo rank that died while this one sent to it)
  // fails with EPIPE, which the caller handles, instead of ending the process with SIGPIPE.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, nullptr);
  thread_ = std::thread([this, on_signal = std::move(on_signal)] { watch(on_signal); });
}

void SignalWatcher::watch(const std::function<void(int)>& on_signal) {
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> deadline;  // armed by a signal that finds the parent gone
  int last_signal = 0;
  for (;;) {
    int timeout_ms = -1;
    if (deadline)
      timeout_ms = static_cast<int>(std::max<int64_t>(
          0,
          std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count()));
    pollfd in{pipe_[0], POLLIN, 0};
    const int ready = ::poll(&in, 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0 && deadline && Clock::now() >= *deadline) {
      spdlog::warn("still running {} ms after signal {} with its launcher gone: leaving now",
                   orphan_grace_->count(), last_signal);
      spdlog::default_logger()->flush();
      std::_Exit(128 + last_signal);
    }
    if (ready <= 0) continue;
    unsigned char byte = 0;
    const ssize_t n = read(pipe_[0], &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || byte == 0) return;  // 0: the destructor's wake-up
    last_signal = byte;
    if (orphan_grace_ && !deadline && parent_ != 1 && ::getppid() != parent_) {
      deadline = Clock::now() + *orphan_grace_;
      spdlog::warn("signal {} with its launcher gone (parent {} exited): {} ms to end", byte,
                   parent_, orphan_grace_->count());
    }
    on_signal(byte);
  }
}

SignalWatcher::~SignalWatcher() {
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGPIPE, &sa, nullptr);
  g_signal_pipe.store(-1);
  const unsigned char stop = 0;
  [[maybe_unused]] ssize_t n = write(pipe_[1], &stop, 1);
  thread_.join();
  close(pipe_[0]);
  close(pipe_[1]);
}

}  // namespace geotrain::cli
