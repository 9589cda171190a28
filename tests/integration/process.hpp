// Child processes for the multi-process tests: the real `geotrain` binary, started with
// posix_spawn, output to a log file, killed (SIGKILL) and reaped if still running when the
// Process object is destroyed, so a failing test leaves nothing behind.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace geotrain::test {

// Processes whose command line mentions `needle` (a run folder): none may remain after a run.
inline int processes_mentioning(const std::string& needle) {
  int n = 0;
  for (const auto& p : std::filesystem::directory_iterator("/proc")) {
    std::ifstream f(p.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(f)), {});
    if (cmd.find(needle) != std::string::npos) ++n;
  }
  return n;
}

class Process {
 public:
  // `prefix`: a command that runs the binary (e.g. `ip netns exec NS`), found on PATH.
  Process(std::vector<std::string> args, const std::filesystem::path& log,
          std::vector<std::string> prefix = {})
      : Process(with_binary(std::move(args), std::move(prefix)), log, Program{}) {}
  // Another program than geotrain (a daemon a test runs: argv[0] found on PATH).
  struct Program {};
  Process(std::vector<std::string> args, const std::filesystem::path& log, Program) : log_(log) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = posix_spawnp(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE_MESSAGE(rc == 0, "posix_spawn failed: ", rc);
  }
  ~Process() {
    if (pid_ > 0 && !exit_code_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // Exit code once the process ended within `timeout` (then reaped), nullopt otherwise.
  std::optional<int> wait(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!exit_code_) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return exit_code_;
  }
  void terminate() { signal(SIGTERM); }
  void signal(int sig) {
    if (!exit_code_) kill(pid_, sig);
  }
  std::string log() const {
    std::ifstream f(log_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  static std::vector<std::string> with_binary(std::vector<std::string> args,
                                              std::vector<std::string> prefix) {
    args.insert(args.begin(), GEOTRAIN_BINARY);
    args.insert(args.begin(), prefix.begin(), prefix.end());
    return args;
  }

  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::filesystem::path log_;
};

// A loopback port nobody listens on right now, below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999 by default): the kernel hands the ports of that
// range to every outgoing connection's local end and to bind(0), so one picked there and bound
// by a process seconds later may have been taken meanwhile (test_slurm, 2026-11-29: a server's
// bind "Address already in use"); below it, only another explicit bind can take it. Random in
// [20000, 32000), so that parallel tests rarely pick alike, and checked by a bind now.
inline int free_port() {
  static std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(20000, 31999);
  for (int tries = 0; tries < 1000; ++tries) {
    const int port = pick(rng);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    close(fd);
    if (free) return port;
  }
  FAIL("no free loopback port in [20000, 32000) after 1000 tries");
  return 0;
}

}  // namespace geotrain::test
