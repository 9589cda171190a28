// A leader whose requests vanish in the WAN while its server still counts it: region b reaches
// region a's server through a netsim link that swallows everything for a while (blackhole) and
// then resets its connections, as a restarted netsim does. ZeroMQ reconnects the striped lanes
// under the same identities, so the server never hears of it; the leader sees its connection break
// with replies awaited, rejoins the server and pushes again, and the synchronous rounds go on,
// every region with the closed-form values, long before worker.timeout_ms would have given up.
// The two regions' servers: tests/worker/two_servers.hpp.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "tests/netsim/netsim_test_util.hpp"
#include "tests/worker/two_servers.hpp"
#include "worker/leader/region_sync.hpp"

using namespace geotrain;
using namespace geotrain::test;
using namespace std::chrono_literals;

TEST_CASE(
    "requests lost in a reset connection: the leader rejoins the server at once and the rounds "
    "go on") {
  TwoServers two("link-reset");
  auto port_of = [](const std::string& endpoint) {
    return static_cast<uint16_t>(std::stoi(endpoint.substr(endpoint.rfind(':') + 1)));
  };
  // b -> a's server: 5 ms each way; from 0.5 s nothing gets through, at 1.5 s every connection
  // is reset (what was swallowed is gone).
  netsim::Fault blackhole;
  blackhole.kind = netsim::FaultKind::blackhole;
  blackhole.at_s = 0.5;
  blackhole.until_s = 1.5;
  netsim::test::OneLink link(
      netsim::Endpoint{"127.0.0.1", port_of(two.servers[0].server->endpoint())},
      netsim::test::props(5), {blackhole});
  const auto via = fmt::format("tcp://127.0.0.1:{}", link.via().port);

  const ParamTable table(two.config.tensors, two.config.critical);
  constexpr int kRounds = 60;
  std::vector<std::vector<float>> final_base(2);
  std::vector<uint64_t> rejoins(2);
  const auto errors = two.run_leaders(
      [&](int r) {
        auto c = two.leader(r);
        if (r == 1) c.servers[0].endpoint = via;
        // Striped: the lanes reconnect under their own routing ids, so the server sees the
        // same peer (over one plain connection it would see a new one, and say so).
        c.streams_per_server = 4;
        return c;
      },
      [&](int r, worker::RegionSync& sync) {
        std::vector<float> local(table.total_elements());
        for (int round = 0; round < kRounds; ++round) {
          for (size_t i = 0; i < local.size(); ++i) local[i] = sync.base()[i] + step_of(r);
          std::this_thread::sleep_for(30ms);
          sync.exchange(local);
        }
        final_base[r].assign(sync.base().begin(), sync.base().end());
        rejoins[r] = sync.rejoins();
      },
      [] {});
  for (int r = 0; r < 2; ++r) {
    INFO("region " << two.config.regions[r] << ": " << errors[r]);
    REQUIRE(errors[r].empty());
    REQUIRE(final_base[r].size() == table.total_elements());
    size_t wrong = 0;
    for (float v : final_base[r]) wrong += std::fabs(v - 0.015f * kRounds) > 1e-4f;
    CHECK(wrong == 0);
  }
  CHECK(rejoins[0] == 0);
  CHECK(rejoins[1] >= 1);  // b rejoined a's server after the reset
  CHECK(link.proxy.stats()[0].bytes_dropped > 0);
}
