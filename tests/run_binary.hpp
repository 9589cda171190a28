// Runs the real `geotrain` binary (GEOTRAIN_BINARY, set by the suite's CMake) with `args`, as a
// user would from a shell, and returns its exit code and everything it printed (stdout and
// stderr). `env` goes in front of the command line, e.g. "RANK=3" or "env -u RANK".
// Blocks until the process exits.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace geotrain::test {

struct BinaryOutput {
  int code;
  std::string text;
};

inline BinaryOutput run_binary(const std::string& args, const std::string& env = "") {
  const std::string command = env + " " + std::string(GEOTRAIN_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 4096> buf;
  for (size_t got; (got = fread(buf.data(), 1, buf.size(), pipe)) > 0;) out.append(buf.data(), got);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace geotrain::test
