// Two regions (a, b), each with its ParamServer over loopback TCP, for the tests of a leader's
// shards across servers (test_region_rejoin.cpp: servers that restart, stop, or end a run;
// test_sit_out.cpp: rounds a region sits out): fp32 codecs both ways, staleness bound 0, every
// tensor critical, plain averaging, so that every released round of the global model is a
// closed-form sum of the regions' steps. TwoServers runs the servers (stopped, restarted, read),
// DeferringLeaders both leaders with worker.shard_wait round by round.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/param_server.hpp"
#include "worker/leader/region_sync.hpp"

namespace geotrain::test {

using namespace std::chrono_literals;

// `dead_after`: server.dead_after_ms (server.heartbeat_ms a quarter of it, at most 1 s).
inline server::ServerConfig config_in(const std::filesystem::path& dir, uint32_t fragments,
                                      std::chrono::milliseconds dead_after = 60s) {
  return server::parse_server_config(fmt::format(R"(
worker: {{fragments: {}}}
regions: [a, b]
model:
  tensors: [{{name: crit.w, size: 1024}}, {{name: free.w, size: 2048}}]
  critical: ["crit.*", "free.*"]
server:
  staleness_bound: 0
  downlink_codec: fp32
  dead_after_ms: {}
  heartbeat_ms: {}
  checkpoint: {{every: 1, keep: 2}}
  run_dir: "{}"
)",
                                                 fragments, dead_after.count(),
                                                 std::min<int64_t>(1000, dead_after.count() / 4),
                                                 dir.string()));
}

// Region r's leader on the two servers, fp32 codecs both ways.
inline worker::SyncConfig leader_config(const server::ServerConfig& config, int r,
                                        const std::string& a_endpoint,
                                        const std::string& b_endpoint) {
  worker::SyncConfig c;
  c.region = config.regions[r];
  c.servers = {{"a", a_endpoint}, {"b", b_endpoint}};
  c.critical_codec = c.noncritical_codec = "fp32";
  c.timeout = 20s;
  c.heartbeat = 200ms;
  return c;
}

struct RunningServer {
  std::unique_ptr<server::ParamServer> server;
  std::jthread thread;
};

inline RunningServer start_server(const server::ServerConfig& config, uint32_t region,
                                  wire::Context& context, const std::string& endpoint) {
  server::ServerOptions options;
  options.endpoint = endpoint;
  options.poll = 5ms;
  RunningServer s;
  s.server = std::make_unique<server::ParamServer>(config, region, context, options);
  auto* raw = s.server.get();
  s.thread = std::jthread([raw](std::stop_token st) { raw->run(st); });
  return s;
}

// Region r's step in every round: a moves every parameter by 0.01, b by 0.02.
inline float step_of(int r) { return 0.01f * static_cast<float>(r + 1); }

// Both regions' servers over loopback TCP, with their run folder `geotrain-<name>-<pid>`.
struct TwoServers {
  explicit TwoServers(const std::string& name, uint32_t fragments = 1,
                      std::chrono::milliseconds dead_after = 60s)
      : dir(std::filesystem::temp_directory_path() /
            fmt::format("geotrain-{}-{}", name, ::getpid())),
        config((std::filesystem::remove_all(dir), config_in(dir, fragments, dead_after))) {
    for (uint32_t r = 0; r < 2; ++r)
      servers.push_back(start_server(config, r, context, "tcp://127.0.0.1:0"));
  }
  // Region r's leader config with worker.shard_wait_ms 150: a stopped server's shards deferred.
  worker::SyncConfig deferring_leader(int r) const {
    auto c = leader_config(config, r, servers[0].server->endpoint(), servers[1].server->endpoint());
    c.shard_wait = 150ms;
    return c;
  }
  // Server s stops taking messages (its loop ends; they wait in its socket), as under SIGSTOP.
  void stop_loop(uint32_t s) {
    servers[s].thread.request_stop();
    servers[s].thread.join();
  }
  // Server s dies (in-flight requests are lost with it) and, `down` later, comes back on the same
  // address, restoring its newest checkpoint.
  void restart(uint32_t s, std::chrono::milliseconds down = {}) {
    const std::string endpoint = kill(s);
    std::this_thread::sleep_for(down);
    come_back(s, endpoint);
  }
  // Server s dies (in-flight requests are lost with it); returns its address.
  std::string kill(uint32_t s) {
    std::string endpoint = servers[s].server->endpoint();
    if (servers[s].thread.joinable()) stop_loop(s);
    servers[s].server.reset();
    return endpoint;
  }
  // Server s, killed, starts again on `endpoint`, restoring its newest checkpoint.
  void come_back(uint32_t s, const std::string& endpoint) {
    // The old socket is closed by ZeroMQ's I/O thread, a moment later: until then its port is
    // taken.
    for (int attempt = 0;; ++attempt) {
      try {
        servers[s] = start_server(config, s, context, endpoint);
        return;
      } catch (const std::exception& e) {
        REQUIRE_MESSAGE(attempt < 200, "server ", s, " could not come back: ", e.what());
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
      }
    }
  }
  // The two leaders at once, each on its own thread with its own ZeroMQ context and a RegionSync
  // connected with config_of(r), handed to body(r, sync); `meanwhile` runs on this thread before
  // they are joined. Returns what each threw (empty: nothing); on_error(r) runs on its thread.
  std::vector<std::string> run_leaders(const std::function<worker::SyncConfig(int)>& config_of,
                                       const std::function<void(int, worker::RegionSync&)>& body,
                                       const std::function<void()>& meanwhile,
                                       const std::function<void(int)>& on_error = {}) {
    const ParamTable table(config.tensors, config.critical);
    std::vector<std::string> errors(2);
    std::vector<std::jthread> leaders;
    for (int r = 0; r < 2; ++r)
      leaders.emplace_back([&, r] {
        try {
          wire::Context leader_context;
          worker::RegionSync sync(table, config_of(r), leader_context);
          sync.connect();
          body(r, sync);
        } catch (const std::exception& e) {
          errors[r] = e.what();
          if (on_error) on_error(r);
        }
      });
    meanwhile();
    leaders.clear();  // joins
    return errors;
  }
  // Server s's shards as a failed test should show them: each one's released round and version,
  // and every region's clock. Ends the server's loop first (it is read, not raced).
  std::string describe(uint32_t s) {
    if (servers[s].thread.joinable()) stop_loop(s);
    std::string out = fmt::format("server {}:", config.regions[s]);
    for (const auto& shard : servers[s].server->shards()) {
      out +=
          fmt::format(" [released {}, version {}, clocks", shard.released_round(), shard.version());
      for (size_t r = 0; r < config.regions.size(); ++r)
        out += fmt::format(" {}={}", config.regions[r], shard.gate().clock(r));
      out += "]";
    }
    return out;
  }
  worker::SyncConfig leader(int r) const {
    return leader_config(config, r, servers[0].server->endpoint(), servers[1].server->endpoint());
  }
  ~TwoServers() {
    for (auto& s : servers) s.thread.request_stop();
    servers.clear();
    std::filesystem::remove_all(dir);
  }
  const std::filesystem::path dir;
  const server::ServerConfig config;
  wire::Context context;
  std::vector<RunningServer> servers;
};

// Both regions' leaders with worker.shard_wait, each on its own thread for `rounds` rounds, as an
// overlapped region does: every round merges the deferred shards whose replies came (take_ready)
// and starts each shard that is not deferred from the global values plus its progress (a: 0.01,
// b: 0.02); a deferred one keeps its push. The rounds start together (a barrier), and a deferred
// shard of a server that runs is waited for, so that both regions merge it in the same round: a
// region that merged a round earlier would push a round the other sits out, and the values would
// not be whole multiples of both regions' step.
struct DeferringLeaders {
  TwoServers& two;
  int rounds;
  std::atomic<bool> running[2] = {true, true};  // set by the test: server s's loop runs
  std::atomic<int> rounds_done[2] = {0, 0};
  int while_stopped[2] = {0, 0}, deferring[2] = {0, 0}, late[2] = {0, 0};
  std::vector<std::vector<float>> final_base = std::vector<std::vector<float>>(2);
  std::vector<std::string> errors = std::vector<std::string>(2);

  // Runs the leaders; `meanwhile` on this thread (stopping and resuming servers) before they are
  // joined.
  void run(const std::function<void()>& meanwhile) {
    const ParamTable table(two.config.tensors, two.config.critical);
    bool runs[2] = {true, true};  // read once per round for both regions
    std::barrier round_start(2, [&]() noexcept {
      for (int s = 0; s < 2; ++s) runs[s] = running[s].load();
    });
    std::vector<std::jthread> leaders;
    for (int r = 0; r < 2; ++r)
      leaders.emplace_back([&, r] {
        try {
          wire::Context context;
          worker::RegionSync sync(table, two.deferring_leader(r), context);
          sync.connect();
          const float step = step_of(r);
          std::vector<float> local(sync.base().begin(), sync.base().end());
          std::vector<ElementRange> deferred;
          // Shard s lies on server s (one shard per region's server, in region order).
          const auto ranges = sync.fragment_ranges(0);
          const auto waits_for = [&] {
            return std::any_of(deferred.begin(), deferred.end(), [&](const ElementRange& d) {
              return runs[std::find(ranges.begin(), ranges.end(), d) - ranges.begin()];
            });
          };
          for (int round = 0; round < rounds; ++round) {
            round_start.arrive_and_wait();
            // A running server's deferred shards: their replies come, wait for them.
            for (int polls = 0; waits_for() && polls < 2000; ++polls) {
              for (const auto& range : sync.take_ready(0)) {
                deferred.erase(std::find(deferred.begin(), deferred.end(), range));
                ++late[r];
              }
              if (waits_for()) std::this_thread::sleep_for(5ms);
            }
            for (const auto& range : ranges) {
              if (std::find(deferred.begin(), deferred.end(), range) != deferred.end()) continue;
              for (uint64_t i = range.offset; i < range.end(); ++i)
                local[i] = sync.base()[i] + step;
            }
            std::this_thread::sleep_for(20ms);
            const auto report = sync.exchange(local, std::nullopt, /*defer=*/true);
            deferred = report.deferred;
            deferring[r] += !deferred.empty();
            while_stopped[r] += !(running[0] && running[1]) ? 1 : 0;
            rounds_done[r] = round + 1;
          }
          CHECK(sync.settle().size() == deferred.size());
          CHECK(sync.deferred_shards() == 0);
          final_base[r].assign(sync.base().begin(), sync.base().end());
        } catch (const std::exception& e) {
          errors[r] = e.what();
          round_start.arrive_and_drop();  // the other region goes on alone
        }
      });
    meanwhile();
    leaders.clear();  // joins
  }
  void wait_for_round(int round) const {
    while (rounds_done[0] < round || rounds_done[1] < round) std::this_thread::sleep_for(1ms);
  }
  // Server s stops taking messages, as under SIGSTOP; resume() runs its loop again.
  void stop(uint32_t s) {
    running[s] = false;
    two.stop_loop(s);
  }
  void resume(uint32_t s) {
    auto* server = two.servers[s].server.get();
    two.servers[s].thread = std::jthread([server](std::stop_token st) { server->run(st); });
    running[s] = true;
  }
};

// The clocks (last round pushed, per region) of server s's shard; its loop stopped to read them.
std::vector<uint64_t> clocks_of(TwoServers& two, uint32_t s) {
  if (two.servers[s].thread.joinable()) two.stop_loop(s);
  return two.servers[s].server->shards().at(0).gate().clocks();
}
}  // namespace geotrain::test
