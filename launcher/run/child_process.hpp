// ChildProcess: one child process started with fork/exec, owned for its whole life (RAII).
//
// The child: joins the given process group (or leads a new one), gets PR_SET_PDEATHSIG
// (SIGTERM) so it never outlives the launcher, starts with an empty signal mask and default
// dispositions (a caller's blocked signals would otherwise be inherited through exec; signals
// are blocked across fork so no parent handler runs in the child), reads /dev/null and appends
// stdout and stderr to a log file. PR_SET_PDEATHSIG fires when the *thread* that forked exits:
// spawn from the thread that lives as long as the launcher (main). The destructor SIGKILLs and
// reaps a child still running. poll() and wait_for() reap. Movable, not copyable; not thread-safe
// (one owner thread).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace geotrain::launcher {

class ChildProcess {
 public:
  // Starts `binary args...`; process_group 0 = the child leads a new group. SystemError when
  // fork fails; an exec failure shows as exit status 127 with the reason in the log.
  ChildProcess(const std::string& binary, const std::vector<std::string>& args,
               const std::filesystem::path& log, pid_t process_group = 0);
  ~ChildProcess();
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !status_; }
  // The exit status once it has exited (never blocks): the exit code, or 128 + signal number.
  std::optional<int> poll();
  // Waits up to `timeout` for it to exit (polling every 10 ms).
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  void signal(int sig) const;  // no-op once exited

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// "exit 1", "killed by SIGKILL", ... for an exit status from ChildProcess.
std::string describe_status(int status);

// The last `lines` lines of a text file ("" when unreadable).
std::string tail_lines(const std::filesystem::path& file, std::size_t lines);

}  // namespace geotrain::launcher
