// SignalWatcher: turns SIGINT and SIGTERM into a stop request, for the long-running commands
// (server, worker, netsim, run).
//
// Why a handler and a pipe, not sigwait: libraries start threads before main() (OpenBLAS's
// pool), and those never block the signals, so the kernel may deliver SIGTERM to them; only a
// process-wide handler catches it wherever it lands. The handler does the one async-signal-safe
// thing, write() a byte to a self-pipe; a watcher thread reads it and calls `on_signal` (once
// per signal). The pipe's write end is the single process-wide variable this needs (a signal
// handler can reach nothing else); one SignalWatcher may exist at a time.
//
// Owns the pipe and the thread; the destructor restores the default handlers, wakes the thread
// and joins it, also when the command ended for another reason or by an exception.
#pragma once

#include <functional>
#include <thread>

namespace geotrain::cli {

class SignalWatcher {
 public:
  explicit SignalWatcher(std::function<void(int signal)> on_signal);
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

 private:
  int pipe_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace geotrain::cli
