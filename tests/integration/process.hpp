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

#include "tests/free_port.hpp"

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

}  // namespace geotrain::test
