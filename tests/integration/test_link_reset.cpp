// A leader whose requests vanish in the WAN while its server still counts it: region b reaches
// region a's server through a netsim link that swallows everything for a while (blackhole) and
// then resets its connections, as a restarted netsim does. ZeroMQ reconnects the striped lanes
// under the same identities, so the server never hears of it; the leader sees its connection break
// with replies awaited, rejoins the server and pushes again, and the synchronous rounds go on,
// every region with the closed-form values, long before worker.timeout_ms would have given up.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "server/param_server.hpp"
#include "tests/netsim/netsim_test_util.hpp"
#include "worker/leader/region_sync.hpp"

using namespace geotrain;
using namespace std::chrono_literals;

TEST_CASE(
    "requests lost in a reset connection: the leader rejoins the server at once and the rounds "
    "go on") {
  const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("geotrain-link-reset-{}", ::getpid());
  std::filesystem::remove_all(dir);
  const auto config = server::parse_server_config(fmt::format(R"(
regions: [a, b]
model:
  tensors: [{{name: crit.w, size: 1024}}, {{name: free.w, size: 2048}}]
  critical: ["crit.*", "free.*"]
server:
  staleness_bound: 0
  downlink_codec: fp32
  dead_after_ms: 60000
  run_dir: "{}"
)",
                                                              dir.string()));
  zmq::context_t server_context;
  std::vector<std::unique_ptr<server::ParamServer>> servers;
  std::vector<std::jthread> loops;
  for (uint32_t r = 0; r < 2; ++r) {
    server::ServerOptions options;
    options.endpoint = "tcp://127.0.0.1:0";
    options.poll = 5ms;
    servers.push_back(std::make_unique<server::ParamServer>(config, r, server_context, options));
    loops.emplace_back([s = servers.back().get()](std::stop_token st) { s->run(st); });
  }
  auto port_of = [](const std::string& endpoint) {
    return static_cast<uint16_t>(std::stoi(endpoint.substr(endpoint.rfind(':') + 1)));
  };
  // b -> a's server: 5 ms each way; from 0.5 s nothing gets through, at 1.5 s every connection
  // is reset (what was swallowed is gone).
  netsim::Fault blackhole;
  blackhole.kind = netsim::FaultKind::blackhole;
  blackhole.at_s = 0.5;
  blackhole.until_s = 1.5;
  netsim::test::OneLink link(netsim::Endpoint{"127.0.0.1", port_of(servers[0]->endpoint())},
                             netsim::test::props(5), {blackhole});
  const auto via = fmt::format("tcp://127.0.0.1:{}", link.via().port);

  const ParamTable table(config.tensors, config.critical);
  constexpr int kRounds = 60;
  std::vector<std::vector<float>> final_base(2);
  std::vector<uint64_t> rejoins(2);
  std::vector<std::string> errors(2);
  {
    std::vector<std::jthread> leaders;
    for (int r = 0; r < 2; ++r)
      leaders.emplace_back([&, r] {
        try {
          zmq::context_t context;
          worker::SyncConfig c;
          c.region = config.regions[r];
          c.servers = {{"a", r == 1 ? via : servers[0]->endpoint(), std::nullopt},
                       {"b", servers[1]->endpoint(), std::nullopt}};
          c.critical_codec = c.noncritical_codec = "fp32";
          c.timeout = 20s;  // what a lost request would have cost, at least
          c.heartbeat = 200ms;
          // Striped: the lanes reconnect under their own routing ids, so the server sees the
          // same peer (over one plain connection it would see a new one, and say so).
          c.streams_per_server = 4;
          worker::RegionSync sync(table, c, context);
          sync.connect();
          const float step = 0.01f * static_cast<float>(r + 1);
          std::vector<float> local(table.total_elements());
          for (int round = 0; round < kRounds; ++round) {
            for (size_t i = 0; i < local.size(); ++i) local[i] = sync.base()[i] + step;
            std::this_thread::sleep_for(30ms);
            sync.exchange(local);
          }
          final_base[r].assign(sync.base().begin(), sync.base().end());
          rejoins[r] = sync.rejoins();
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
  }
  loops.clear();
  for (int r = 0; r < 2; ++r) {
    INFO("region " << config.regions[r] << ": " << errors[r]);
    REQUIRE(errors[r].empty());
    REQUIRE(final_base[r].size() == table.total_elements());
    size_t wrong = 0;
    for (float v : final_base[r]) wrong += std::fabs(v - 0.015f * kRounds) > 1e-4f;
    CHECK(wrong == 0);
  }
  CHECK(rejoins[0] == 0);
  CHECK(rejoins[1] >= 1);  // b rejoined a's server after the reset
  CHECK(link.proxy.stats()[0].bytes_dropped > 0);
  std::filesystem::remove_all(dir);
}
