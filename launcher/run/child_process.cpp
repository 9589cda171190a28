#include "launcher/run/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <thread>

#include "core/error.hpp"

namespace geotrain::launcher {

namespace {
int decode(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 255;
}

// Only async-signal-safe calls between fork and exec.
[[noreturn]] void exec_child(const char* binary, char* const* argv, const char* log, pid_t group,
                             pid_t parent) {
  ::setpgid(0, group);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(126);  // the launcher died before prctl took effect
  // Default dispositions first (the parent's handlers would write to its pipes), then unblock.
  for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  const int in = ::open("/dev/null", O_RDONLY);
  const int out = ::open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (in >= 0) ::dup2(in, 0);
  if (out >= 0) {
    ::dup2(out, 1);
    ::dup2(out, 2);
  }
  ::execv(binary, argv);
  const char* why = std::strerror(errno);  // not strictly async-signal-safe; we exit right after
  const char msg[] = "geotrain run: cannot execute the child: ";
  (void)!::write(2, msg, sizeof msg - 1);
  (void)!::write(2, why, std::strlen(why));
  (void)!::write(2, "\n", 1);
  ::_exit(127);
}
}  // namespace

ChildProcess::ChildProcess(const std::string& binary, const std::vector<std::string>& args,
                           const std::filesystem::path& log, pid_t process_group) {
  std::vector<std::string> owned;
  owned.push_back(binary);
  owned.insert(owned.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log_path = log.string();
  const pid_t parent = ::getpid();
  // No signal handler may run in the child before exec: block everything across the fork.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_ = ::fork();
  if (pid_ == 0) exec_child(owned[0].c_str(), argv.data(), log_path.c_str(), process_group, parent);
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid_ < 0) throw SystemError("posix", "fork()", __FILE__, __LINE__, std::strerror(fork_errno));
  ::setpgid(pid_, process_group == 0 ? pid_ : process_group);  // also here: no race with exec
}

ChildProcess::~ChildProcess() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    int ws = 0;
    while (::waitpid(pid_, &ws, 0) < 0 && errno == EINTR) {
    }
  }
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(other.pid_), status_(other.status_) {
  other.pid_ = -1;
  other.status_.reset();
}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    ChildProcess gone(std::move(*this));
    pid_ = other.pid_;
    status_ = other.status_;
    other.pid_ = -1;
    other.status_.reset();
  }
  return *this;
}

std::optional<int> ChildProcess::poll() {
  if (pid_ <= 0 || status_) return status_;
  int ws = 0;
  const pid_t r = ::waitpid(pid_, &ws, WNOHANG);
  if (r == pid_) status_ = decode(ws);
  return status_;
}

std::optional<int> ChildProcess::wait_for(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!poll() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return status_;
}

void ChildProcess::signal(int sig) const {
  if (pid_ > 0 && !status_) ::kill(pid_, sig);
}

std::string describe_status(int status) {
  if (status > 128 && status < 128 + 65) {
    const char* name = ::sigabbrev_np(status - 128);
    return fmt::format("killed by SIG{}", name ? name : std::to_string(status - 128));
  }
  return fmt::format("exit {}", status);
}

std::string tail_lines(const std::filesystem::path& file, std::size_t lines) {
  std::ifstream f(file);
  std::deque<std::string> last;
  for (std::string line; std::getline(f, line);) {
    last.push_back(std::move(line));
    if (last.size() > lines) last.pop_front();
  }
  std::string out;
  for (const auto& l : last) out += "  | " + l + "\n";
  return out;
}

}  // namespace geotrain::launcher
