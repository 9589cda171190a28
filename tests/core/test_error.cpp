#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

#include "core/check_zmq.hpp"
#include "core/check_zstd.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/yaml_reader.hpp"

using namespace geotrain;

TEST_CASE("GT_REQUIRE throws an InputError carrying the formatted message") {
  auto check = [](int chunk) {
    GT_REQUIRE(chunk % 32 == 0, "chunk {} is not a multiple of 32", chunk);
  };
  CHECK_NOTHROW(check(64));
  try {
    check(33);
    FAIL("no exception");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) == "chunk 33 is not a multiple of 32");
  }
}

TEST_CASE("a failing zstd call reports the API, file:line and the expression") {
  char out[4];
  const char in[8] = {1, 2, 3, 4, 5, 6, 7, 8};  // not a zstd frame
  try {
    GT_ZSTD_CHECK(ZSTD_decompress(out, sizeof out, in, sizeof in));
    FAIL("no exception");
  } catch (const SystemError& e) {
    const std::string what = e.what();
    CHECK(e.api() == "zstd");
    CHECK(what.find("test_error.cpp:") != std::string::npos);
    CHECK(what.find("ZSTD_decompress(out, sizeof out, in, sizeof in)") != std::string::npos);
  }
}

TEST_CASE("a failing ZeroMQ call reports errno's text, file:line and the expression") {
  void* context = zmq_ctx_new();
  void* socket = zmq_socket(context, ZMQ_PAIR);
  try {
    GT_ZMQ_CHECK(zmq_bind(socket, "nonsense://here"));
    FAIL("no exception");
  } catch (const SystemError& e) {
    const std::string what = e.what();
    CHECK(e.api() == "zmq");
    CHECK(what.find("zmq_bind(socket, \"nonsense://here\")") != std::string::npos);
    CHECK(what.find("errno") != std::string::npos);
  }
  CHECK(GT_ZMQ_CHECK(zmq_close(socket)) == 0);
  zmq_ctx_term(context);
}

TEST_CASE("a passing zstd call yields its value") {
  CHECK(GT_ZSTD_CHECK(ZSTD_compressBound(100)) >= 100);
}

TEST_CASE("log levels parse, and an unknown level is an input error naming it") {
  CHECK(parse_log_level("debug") == spdlog::level::debug);
  CHECK(parse_log_level("off") == spdlog::level::off);
  CHECK_THROWS_WITH_AS(parse_log_level("loud"), doctest::Contains("log level 'loud' is not one of"),
                       InputError);
}

TEST_CASE("GT_ASSERT aborts on a broken invariant, naming it, and lets a true one pass") {
  int calls = 0;
  GT_ASSERT(++calls == 1, "evaluated once");
  CHECK(calls == 1);
  // The broken one in a child process: it must die of SIGABRT, saying what broke and where.
  int out[2];
  REQUIRE(::pipe(out) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGABRT, SIG_DFL);  // the test framework's crash handler would report and exit
    ::dup2(out[1], STDERR_FILENO);
    ::close(out[0]);
    GT_ASSERT(calls == 2, "calls is {}", calls);
    ::_exit(0);  // not reached when the assertion aborts
  }
  ::close(out[1]);
  std::string said;
  char buffer[512];
  for (ssize_t n; (n = ::read(out[0], buffer, sizeof buffer)) > 0;) said.append(buffer, n);
  ::close(out[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
  CHECK(said.find("calls == 2") != std::string::npos);
  CHECK(said.find("calls is 1") != std::string::npos);
  CHECK(said.find("test_error.cpp") != std::string::npos);
}

TEST_CASE("a deployment config holds its sections only: a sweep section is an unknown key") {
  // A sweep file names a deployment config as its base; its keys are its own, and a `sweep`
  // section in the deployment config itself was once accepted and read by nothing.
  const YamlReader in{"cfg.yaml"};
  CHECK(in.load_deployment_config("regions: [a]\nworker: {rounds: 2}\n")["worker"].IsMap());
  CHECK_THROWS_WITH_AS(in.load_deployment_config("regions: [a]\nsweep: {grid: {}}\n"),
                       doctest::Contains("unknown key 'sweep'"), InputError);
  // A second YAML document would be dropped without a word: refused, as a key written twice is.
  CHECK(in.load_deployment_config("---\nregions: [a]\n...\n")["regions"].IsSequence());
  CHECK_THROWS_WITH_AS(in.load_deployment_config("regions: [a]\n---\nregions: [b]\n"),
                       doctest::Contains("cfg.yaml: holds more than one YAML document"),
                       InputError);
}

// Regression (fuzz/corpus/*_config/crash-complex-key.yaml): a complex YAML key reached
// yaml-cpp's string conversion and escaped every config loader as YAML::TypedBadConversion.
TEST_CASE("a config key that is not a plain name is refused with an InputError naming it") {
  const YamlReader in{"cfg.yaml"};
  const YAML::Node root = YAML::Load("? [a, b]\n: 1\nregions: [x]\n");
  CHECK_THROWS_WITH_AS(
      in.check_keys(root, "", {"regions"}),
      doctest::Contains("cfg.yaml: 'the top level' has a key that is not a plain name"),
      InputError);
  CHECK_THROWS_AS(in.load_deployment_config("? {a: 1}\n: 1\n"), InputError);
  const YAML::Exception e(YAML::Mark::null_mark(), "bad conversion");
  CHECK(std::string(yaml_input_error("cfg.yaml", e).what())
            .starts_with("cfg.yaml: not a valid config"));
}
