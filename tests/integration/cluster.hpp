// A whole deployment on loopback for integration tests: real `geotrain server` and
// `geotrain worker` processes started from one config file, and readers for what they wrote
// (final parameters, metrics JSONL). Blocking: run_cluster waits for every worker.
#pragma once

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "process.hpp"
#include "temp_dir.hpp"

namespace geotrain::test {

using namespace std::chrono_literals;

inline const char* kData = "/usr/share/datasets/fashion-mnist";

struct Cluster {
  std::vector<std::string> regions;
  uint32_t workers = 1;
  std::map<std::string, uint32_t> workers_in;  // per-region counts (an uneven fleet); else workers
  uint32_t workers_of(const std::string& region) const {
    return workers_in.count(region) ? workers_in.at(region) : workers;
  }
  std::string model = R"({arch: "784-32-10", critical: ["fc2.*"]})";
  std::string server_extra;                                       // more keys under server:
  std::string worker_yaml;                                        // keys under worker:
  std::string data = fmt::format("  data_dir: \"{}\"\n", kData);  // the data lines under worker:
  std::string top_yaml;                  // more top-level sections (e.g. security:)
  std::vector<std::string> worker_args;  // more arguments for every worker (e.g. --set ...)
};

struct Outcome {
  std::vector<int> exit_codes;
  std::vector<std::string> logs;
};

// worker.workers_per_region: the count, or {region: count, ...}.
inline std::string workers_text(const Cluster& c) {
  if (c.workers_in.empty()) return std::to_string(c.workers);
  std::string out;
  for (const auto& r : c.regions)
    out += fmt::format("{}{}: {}", out.empty() ? "" : ", ", r, c.workers_of(r));
  return "{" + out + "}";
}

inline std::string config_text(const Cluster& c, const std::filesystem::path& dir,
                               const std::vector<int>& ports) {
  std::string regions, endpoints;
  for (size_t i = 0; i < c.regions.size(); ++i) {
    regions += (i ? ", " : "") + c.regions[i];
    endpoints += fmt::format("{}{}: \"tcp://127.0.0.1:{}\"", i ? ", " : "", c.regions[i], ports[i]);
  }
  return fmt::format(R"(regions: [{}]
model: {}
server:
  endpoints: {{{}}}
  run_dir: "{}"
  dead_after_ms: 60000
{}
worker:
  workers_per_region: {}
  run_dir: "{}"
{}  timeout_ms: 60000
{}
{}
)",
                     regions, c.model, endpoints, dir.string(), c.server_extra, workers_text(c),
                     dir.string(), c.data, c.worker_yaml, c.top_yaml);
}

// Starts one server per region and every worker; waits for the workers; stops the servers.
inline Outcome run_cluster(const Cluster& c, const std::filesystem::path& dir,
                           std::chrono::seconds timeout = 120s) {
  std::vector<int> ports;
  for (size_t i = 0; i < c.regions.size(); ++i) ports.push_back(test::free_port());
  const auto config = dir / "config.yaml";
  std::ofstream(config) << config_text(c, dir, ports);
  std::vector<std::unique_ptr<test::Process>> servers, workers;
  for (const auto& r : c.regions)
    servers.push_back(std::make_unique<test::Process>(
        std::vector<std::string>{"server", "--config", config.string(), "--region", r},
        dir / ("server-" + r + ".log")));
  for (const auto& r : c.regions)
    for (uint32_t k = 0; k < c.workers_of(r); ++k) {
      std::vector<std::string> args{"worker", "--config", config.string(),  "--region",
                                    r,        "--rank",   std::to_string(k)};
      args.insert(args.end(), c.worker_args.begin(), c.worker_args.end());
      workers.push_back(
          std::make_unique<test::Process>(args, dir / fmt::format("worker-{}-{}.log", r, k)));
    }
  Outcome out;
  for (auto& w : workers) {
    auto code = w->wait(timeout);
    out.exit_codes.push_back(code.value_or(-1));
    out.logs.push_back(w->log());
  }
  for (auto& s : servers) s->terminate();
  for (auto& s : servers) CHECK(s->wait(20s).value_or(-1) == 0);
  return out;
}

inline void require_success(const Outcome& o) {
  for (size_t i = 0; i < o.exit_codes.size(); ++i)
    REQUIRE_MESSAGE(o.exit_codes[i] == 0, "worker ", i, " exited with ", o.exit_codes[i], ":\n",
                    o.logs[i]);
}

inline std::vector<float> read_params(const std::filesystem::path& file) {
  std::ifstream f(file, std::ios::binary | std::ios::ate);
  REQUIRE_MESSAGE(f.good(), "no final parameters at ", file.string());
  std::vector<float> v(size_t(f.tellg()) / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  return v;
}

inline std::vector<nlohmann::json> events(const std::filesystem::path& file,
                                          const std::string& kind) {
  std::ifstream f(file);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] == kind) out.push_back(j);
  }
  return out;
}

inline double final_accuracy(const std::filesystem::path& dir, const std::string& region) {
  auto done = events(dir / fmt::format("worker-{}-0.metrics.jsonl", region), "done");
  REQUIRE(done.size() == 1);
  return done[0]["final_test_accuracy"].get<double>();
}

// Starts one worker of a one-region config with no server running, expects it to fail at
// start-up, and returns its log (what a user would read).
inline std::string start_worker_alone(const std::string& worker_yaml,
                                      const std::string& model = R"({arch: "784-32-10"})") {
  TempDir dir("bad");
  const auto config = dir.path() / "config.yaml";
  std::ofstream(config) << fmt::format(
      "regions: [a]\nmodel: {}\nserver: {{endpoints: {{a: \"tcp://127.0.0.1:{}\"}}}}\nworker:\n  "
      "run_dir: \"{}\"\n{}",
      model, free_port(), dir.path().string(), worker_yaml);
  Process w({"worker", "--config", config.string(), "--region", "a"}, dir.path() / "w.log");
  const auto code = w.wait(30s);
  REQUIRE(code.has_value());
  CHECK(*code != 0);
  return w.log();
}

}  // namespace geotrain::test
