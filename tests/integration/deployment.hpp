// A deployment started as docs/deploy.md says, for the tests of where processes run and who
// launches them (test_netns, test_mpirun): three regions of two workers, one config naming the
// servers' endpoints, synchronous fp32 rounds (so that any two launches of the same config give
// the same parameters, bit for bit), everything written to one folder.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cluster.hpp"
#include "process.hpp"

namespace geotrain::test {

using namespace std::chrono_literals;

inline const std::vector<std::string> kRegions = {"a", "b", "c"};

// The config: regions a, b, c at `endpoints`, their workers meeting over `gloo_host`, leaders
// striping over `streams` connections per server; metrics and final parameters in `dir`.

inline std::string deployment_config(const std::filesystem::path& dir,
                                     const std::vector<std::string>& endpoints,
                                     const std::string& gloo_host, uint32_t streams) {
  std::string eps;
  for (size_t i = 0; i < kRegions.size(); ++i)
    eps += fmt::format("{}{}: \"{}\"", i ? ", " : "", kRegions[i], endpoints[i]);
  return fmt::format(R"(regions: [a, b, c]
model: {{arch: "784-32-10", critical: ["*"]}}
server:
  endpoints: {{{}}}
  run_dir: "{}"
  dead_after_ms: 60000
worker:
  workers_per_region: 2
  run_dir: "{}"
  data_dir: "{}"
  gloo_host: "{}"
  streams_per_server: {}
  batch_size: 16
  local_steps: 2
  rounds: 6
  eval_every: 0
  seed: 5
  timeout_ms: 60000
  critical_codec: fp32
  noncritical_codec: fp32
)",
                     eps, dir.string(), dir.string(), kData, gloo_host, streams);
}

// Every region's server and two workers, each started with its --region and --rank; `host(i)` the
// prefix that places region i's processes (none: this host). Waits for the workers, then stops
// the servers.
inline void run_by_hand(const std::filesystem::path& dir, const std::vector<std::string>& endpoints,
                        const std::function<std::vector<std::string>(size_t)>& host,
                        const std::function<std::string(size_t)>& gloo_host, uint32_t streams) {
  std::vector<std::unique_ptr<Process>> servers, workers;
  for (size_t i = 0; i < kRegions.size(); ++i) {
    const auto file = dir / fmt::format("config-{}.yaml", kRegions[i]);
    std::ofstream(file) << deployment_config(dir, endpoints, gloo_host(i), streams);
    servers.push_back(std::make_unique<Process>(
        std::vector<std::string>{"server", "--config", file.string(), "--region", kRegions[i]},
        dir / fmt::format("server-{}.log", kRegions[i]), host(i)));
    for (int k = 0; k < 2; ++k)
      workers.push_back(std::make_unique<Process>(
          std::vector<std::string>{"worker", "--config", file.string(), "--region", kRegions[i],
                                   "--rank", std::to_string(k)},
          dir / fmt::format("worker-{}-{}.log", kRegions[i], k), host(i)));
  }
  for (auto& w : workers) {
    const auto code = w->wait(180s);
    REQUIRE_MESSAGE(code.value_or(-1) == 0, "a worker failed:\n", w->log());
  }
  for (auto& s : servers) s->terminate();
  for (auto& s : servers) CHECK(s->wait(20s).value_or(-1) == 0);
}

// One loopback endpoint a region, on ports nobody listens on now.
inline std::vector<std::string> loopback_endpoints() {
  std::vector<std::string> out;
  for (size_t i = 0; i < kRegions.size(); ++i)
    out.push_back(fmt::format("tcp://127.0.0.1:{}", free_port()));
  return out;
}

// Every region's final parameters in `launched` equal, bit for bit, those in `reference`
// (`how` names the two in the message).
inline void check_same_model(const std::filesystem::path& launched,
                             const std::filesystem::path& reference, const std::string& how) {
  for (const auto& r : kRegions) {
    const auto a = read_params(launched / fmt::format("params-{}.f32", r));
    const auto b = read_params(reference / fmt::format("params-{}.f32", r));
    REQUIRE(a.size() == b.size());
    CHECK_MESSAGE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0, "region ", r,
                  ": parameters differ between ", how);
  }
}

// The deployment started by hand on loopback in `dir` (fresh ports); its model must be the one
// in `launched`.
inline void check_same_as_by_hand(const std::filesystem::path& launched,
                                  const std::filesystem::path& dir, const std::string& what) {
  std::filesystem::create_directories(dir);
  run_by_hand(
      dir, loopback_endpoints(), [](size_t) { return std::vector<std::string>{}; },
      [](size_t) { return std::string("127.0.0.1"); }, 1);
  check_same_model(launched, dir, what + " and the processes started by hand");
}

}  // namespace geotrain::test
