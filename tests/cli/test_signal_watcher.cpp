// SignalWatcher's orphan deadline (cli/signal_watcher.hpp): a process whose launcher died ends
// within its grace even while it ignores the stop (as a wait that does not heed it would); one
// whose parent lives is left to end by itself (the launcher's own grace bounds an orderly stop).
// The processes are forked here: a "launcher" and its "worker", which sets PR_SET_PDEATHSIG as
// geotrain run's children do.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "cli/signal_watcher.hpp"

using geotrain::cli::SignalWatcher;
using Clock = std::chrono::steady_clock;

namespace {
constexpr std::chrono::milliseconds kGrace{300};

// The worker: SIGTERM when its parent dies, a watcher that ignores the stop, then it waits for
// ever; tells `ready` its pid once the watcher is in place. Never returns.
[[noreturn]] void stubborn_worker(int ready) {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  SignalWatcher watcher([](int) {}, kGrace);
  const pid_t self = ::getpid();
  if (::write(ready, &self, sizeof self) != sizeof self) ::_exit(3);
  for (;;) ::pause();
}

pid_t read_pid(int fd) {
  pid_t pid = 0;
  REQUIRE(::read(fd, &pid, sizeof pid) == sizeof pid);
  return pid;
}
}  // namespace

TEST_CASE(
    "a worker whose launcher was SIGKILLed leaves within its grace, though it ignores the stop") {
  // The test adopts the orphan (as init would), so that it can wait for it and read its status.
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t launcher = ::fork();
  REQUIRE(launcher >= 0);
  if (launcher == 0) {
    if (::fork() == 0) stubborn_worker(ready[1]);
    for (;;) ::pause();
  }
  const pid_t worker = read_pid(ready[0]);
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);
  const auto t0 = Clock::now();
  int status = 0;
  // Polled, so that an orphan left running fails the test instead of hanging it.
  pid_t reaped = 0;
  while (reaped == 0 && Clock::now() - t0 < std::chrono::seconds(5)) {
    reaped = ::waitpid(worker, &status, WNOHANG);
    if (reaped == 0) ::usleep(10'000);
  }
  if (reaped == 0) {
    ::kill(worker, SIGKILL);
    ::waitpid(worker, nullptr, 0);
    FAIL("the orphan was still running 5 s after its launcher died");
  }
  REQUIRE(reaped == worker);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  MESSAGE("the orphan left " << seconds << " s after its launcher died");
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + SIGTERM);
  CHECK(seconds >= 0.25);  // not before its grace: it had the time to end by itself
  CHECK(seconds < 2.0);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_CASE("under a SignalWatcher a write to a closed peer fails with EPIPE, not with SIGPIPE") {
  // In a child: a default SIGPIPE would end it, and this test process with it.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    SignalWatcher watcher([](int) {});
    int ends[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, ends) != 0) ::_exit(3);
    ::close(ends[1]);  // the peer died
    const char byte = 1;
    const bool epipe = ::write(ends[0], &byte, 1) < 0 && errno == EPIPE;
    ::_exit(epipe ? 0 : 4);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK_FALSE(WIFSIGNALED(status));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a worker stopped by its live launcher is not cut short by the orphan deadline") {
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t worker = ::fork();
  REQUIRE(worker >= 0);
  if (worker == 0) stubborn_worker(ready[1]);
  REQUIRE(read_pid(ready[0]) == worker);
  ::kill(worker, SIGTERM);
  ::usleep(1'000'000);  // more than three graces
  int status = 0;
  CHECK(::waitpid(worker, &status, WNOHANG) == 0);  // still running: its parent lives
  ::kill(worker, SIGKILL);
  REQUIRE(::waitpid(worker, &status, 0) == worker);
  CHECK(WIFSIGNALED(status));
  ::close(ready[0]);
  ::close(ready[1]);
}
