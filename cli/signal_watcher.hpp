// SignalWatcher: turns SIGINT and SIGTERM into a stop request, for the long-running commands
// (server, worker, netsim, run), and ignores SIGPIPE meanwhile: a write to a peer that closed its
// end (a Gloo rank that died while this one sent to it) fails with EPIPE, which the caller
// handles (its region re-forms without that rank), instead of ending this process too.
//
// Why a handler and a pipe, not sigwait: libraries start threads before main() (OpenBLAS's
// pool), and those never block the signals, so the kernel may deliver SIGTERM to them; only a
// process-wide handler catches it wherever it lands. The handler does the one async-signal-safe
// thing, write() a byte to a self-pipe; a watcher thread reads it and calls `on_signal` (once
// per signal). The pipe's write end is the single process-wide variable this needs (a signal
// handler can reach nothing else); one SignalWatcher may exist at a time.
//
// An orphan leaves on time. The launcher's children get SIGTERM when it dies (PR_SET_PDEATHSIG,
// launcher/run/child_process.cpp), even by SIGKILL; an orderly stop from a live launcher lets a
// worker finish its round and its snapshot (the launcher's grace bounds that), but nobody
// bounds an orphan's: a wait that does not heed the stop (Gloo's TCP connections to the other
// ranks, which retry until worker.timeout_ms; a large snapshot being written) would keep it for
// as long. With `orphan_grace`, a signal that finds the process's parent gone (getppid() no
// longer the parent at construction) gives it that long to end by itself, after which the
// watcher thread logs where it stands and ends the process with std::_Exit(128 + signal): what
// is on disk stays as the last durable write left it (snapshots and checkpoints are renamed
// into place whole).
//
// Owns the pipe and the thread; the destructor restores the default handlers, wakes the thread
// and joins it, also when the command ended for another reason or by an exception.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <thread>

namespace geotrain::cli {

class SignalWatcher {
 public:
  // How long the launcher's children (server, worker, netsim) have once orphaned.
  static constexpr std::chrono::milliseconds kOrphanGrace{1000};

  explicit SignalWatcher(std::function<void(int signal)> on_signal,
                         std::optional<std::chrono::milliseconds> orphan_grace = std::nullopt);
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

 private:
  // The watcher thread's loop: reads signals, and ends an orphan at its deadline.
  void watch(const std::function<void(int)>& on_signal);

  int pipe_[2] = {-1, -1};
  std::optional<std::chrono::milliseconds> orphan_grace_;
  int parent_ = 0;  // getppid() at construction
  std::thread thread_;
};

}  // namespace geotrain::cli
