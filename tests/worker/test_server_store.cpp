// Gloo rendezvous through the region's server: two workers (threads) find each other through
// the server's key-value exchange and AllReduce over Gloo's TCP transport.
#include <doctest/doctest.h>

#include <future>
#include <thread>

#include "region_server.hpp"
#include "worker/region/gloo_communicator.hpp"
#include "worker/region/server_store.hpp"
#include "worker/stopped.hpp"

using namespace geotrain;
using namespace std::chrono_literals;

TEST_CASE("two workers rendezvous through the server and AllReduce over Gloo") {
  test::RegionServer server("store-server");
  auto rank = [&](int r) {
    auto store = server.store();
    worker::GlooCommunicator comm(*store, r, 2);
    std::vector<float> v(1000, float(r + 1));
    comm.allreduce_sum(v);
    return v;
  };
  auto f1 = std::async(std::launch::async, rank, 1);
  auto v0 = rank(0);
  auto v1 = f1.get();
  for (size_t i = 0; i < v0.size(); ++i) {
    REQUIRE(v0[i] == 3.0f);
    REQUIRE(v1[i] == 3.0f);
  }
}

TEST_CASE("a rendezvous whose peer never comes times out with a message naming the server") {
  wire::Context context;
  // Nothing listens here: the request is queued and never answered.
  worker::ServerStore store(context, "inproc://nobody-home", "gloo/x/", 200ms);
  CHECK_THROWS_WITH_AS(store.get("rank1"),
                       doctest::Contains("no answer from the server at inproc://nobody-home"),
                       SystemError);
}

TEST_CASE("a rendezvous waiting for a peer ends within a fraction of a second of a stop") {
  wire::Context context;
  std::stop_source stop;
  // Nothing answers: without the stop the wait would last its 60 s.
  worker::ServerStore store(context, "inproc://nobody-home-either", "gloo/x/", 60s, {},
                            stop.get_token());
  std::jthread stopper([&] {
    std::this_thread::sleep_for(200ms);
    stop.request_stop();
  });
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(store.get("rank1"), doctest::Contains("stopped while waiting for 'rank1'"),
                       worker::Stopped);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(seconds >= 0.15);
  CHECK(seconds < 2.0);  // 0.3 s on an idle machine: the stop, then one 0.1 s slice at most
}
