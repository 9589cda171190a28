// GlooCommunicator and BucketedAllReduce with N ranks as threads of one process, rendezvous over
// Gloo's in-memory HashStore, TCP on 127.0.0.1; closed-form sums (gloo's own test style).
#include <doctest/doctest.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/param_table.hpp"
#include "core/splitmix64.hpp"
#include "ranks.hpp"
#include "worker/region/bucketed_allreduce.hpp"
#include "worker/region/gloo_communicator.hpp"
#include "worker/region/leader_wait.hpp"

using namespace geotrain;
using namespace geotrain::worker;
using namespace std::chrono_literals;

namespace {

void run_ranks(int size, const std::function<void(GlooCommunicator&)>& body) {
  test::run_ranks<GlooCommunicator>(size, "test", body);
}

}  // namespace

TEST_CASE("3 ranks allreduce to the closed-form sum and broadcast the root's values") {
  std::mutex mu;
  std::vector<std::vector<float>> sums(3), bcasts(3);
  run_ranks(3, [&](GlooCommunicator& comm) {
    const int r = comm.rank();
    std::vector<float> x(1000);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(r + 1) * static_cast<float>(i);
    comm.allreduce_sum(x);  // sum over r of (r + 1) i = 6 i
    std::vector<float> b(10, static_cast<float>(r));
    comm.broadcast(b, 1);
    std::lock_guard lock(mu);
    sums[r] = x;
    bcasts[r] = b;
  });
  for (int r = 0; r < 3; ++r) {
    REQUIRE(sums[r].size() == 1000);
    for (size_t i = 0; i < 1000; i += 37) CHECK(sums[r][i] == static_cast<float>(6 * i));
    CHECK(bcasts[r] == std::vector<float>(10, 1.0f));
  }
}

TEST_CASE("bucketed allreduce plans whole tensors in reverse order and sums every bucket") {
  // Tensors of 300k, 10, 200k, 300k floats with a 1 MB (262144-float) cap. Filling from the
  // last tensor, a bucket closes once it reaches the cap: {d} (300000), {c, b, a} (500010).
  const ParamTable table({{"a", 300000}, {"b", 10}, {"c", 200000}, {"d", 300000}}, {});
  std::mutex mu;
  std::vector<std::vector<float>> results(2);
  std::vector<uint64_t> early(2);
  run_ranks(2, [&](GlooCommunicator& comm) {
    BucketedAllReduce bar(comm, table.tensors(), 1.0);
    REQUIRE(bar.buckets().size() == 2);
    CHECK(bar.buckets()[0].tensors == std::vector<size_t>{3});
    CHECK(bar.buckets()[0].offset == 500010);
    CHECK(bar.buckets()[1].tensors == std::vector<size_t>{2, 1, 0});
    CHECK(bar.buckets()[1].offset == 0);
    CHECK(bar.buckets()[1].size == 500010);
    std::vector<float> g(table.total_elements(), static_cast<float>(comm.rank() + 1));
    bar.tensor_ready(3, g);  // completes bucket 0: reduced now
    bar.tensor_ready(2, g);  // bucket 1 still waits for b and a
    const uint64_t after_first = bar.reductions();
    bar.finish(g);
    std::lock_guard lock(mu);
    results[comm.rank()] = g;
    early[comm.rank()] = after_first;
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(early[r] == 1);
    CHECK(std::all_of(results[r].begin(), results[r].end(), [](float v) { return v == 3.0f; }));
  }
}

TEST_CASE("a rank outside [0, size) and a zero bucket cap are InputErrors") {
  gloo::rendezvous::HashStore store;
  CHECK_THROWS_AS(GlooCommunicator(store, 2, 2), InputError);
  struct Solo final : Communicator {
    int rank() const override { return 0; }
    int size() const override { return 1; }
    void allreduce_sum(FloatSpan) override {}
    void broadcast(FloatSpan, int) override {}
  } solo;
  CHECK_THROWS_WITH_AS(BucketedAllReduce(solo, {}, 0.0), doctest::Contains("bucket_cap_mb 0"),
                       InputError);
}

TEST_CASE("background bucketed allreduce overlaps marking and sums every bucket, step after step") {
  // Small buckets (about 40k floats) so that several reductions are in flight during "backward".
  const ParamTable table({{"w1", 100000}, {"b1", 100}, {"w2", 50000}, {"b2", 10}}, {});
  std::mutex mu;
  std::vector<std::vector<float>> results(3);
  run_ranks(3, [&](GlooCommunicator& comm) {
    BucketedAllReduce bar(comm, table.tensors(), 0.15, /*background=*/true);
    REQUIRE(bar.buckets().size() >= 2);
    std::vector<float> grad(table.total_elements());
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < grad.size(); ++i)
        grad[i] = float((comm.rank() + 1) * (step + 1)) + float(i % 7);
      for (size_t t = table.tensors().size(); t-- > 0;)
        bar.tensor_ready(t, grad);  // as backward would
      bar.finish(grad);
      // sum over ranks of (r + 1)(step + 1) + i % 7 = 6 (step + 1) + 3 (i % 7)
      for (size_t i = 0; i < grad.size(); i += 997)
        REQUIRE(grad[i] == float(6 * (step + 1)) + 3.0f * float(i % 7));
    }
    std::lock_guard lock(mu);
    results[comm.rank()] = grad;
  });
  CHECK(results[0] == results[1]);
  CHECK(results[1] == results[2]);
}

TEST_CASE(
    "the ranks wait for their leader's work longer than the group's timeout, in beats, and a "
    "plain wait that long times out") {
  // Two ranks, a 300 ms collective timeout, the leader busy for 1.2 s.
  const auto run = [](bool beats) {
    gloo::rendezvous::HashStore store;
    std::vector<std::thread> threads;
    std::vector<std::string> errors(2);
    std::vector<float> got(2, 0.0f);
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        try {
          gloo::rendezvous::PrefixStore prefixed(beats ? "beats" : "plain", store);
          GlooCommunicator comm(prefixed, r, 2, GlooOptions{"127.0.0.1", 300ms});
          std::vector<float> value{0.0f};
          const auto work = [&] {
            std::this_thread::sleep_for(1200ms);
            value[0] = 7.0f;
          };
          if (beats)
            wait_for_leader(comm, 75ms, work);
          else if (r == 0)
            work();
          comm.broadcast(value, 0);
          got[r] = value[0];
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    return std::pair{got, errors};
  };
  const auto [got, errors] = run(true);
  CHECK(errors == std::vector<std::string>{"", ""});
  CHECK(got == std::vector<float>{7.0f, 7.0f});  // the leader's result, after its work
  const auto [plain, plain_errors] = run(false);
  CHECK_FALSE(plain_errors[1].empty());  // rank 1 gave up waiting in the broadcast
  CHECK(plain_errors[1].find("Timed out") != std::string::npos);
}

TEST_CASE("the leader's error in the work it waited on reaches the leader, after its ranks left") {
  gloo::rendezvous::HashStore store;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(2);
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        gloo::rendezvous::PrefixStore prefixed("error", store);
        GlooCommunicator comm(prefixed, r, 2, GlooOptions{"127.0.0.1", 2000ms});
        wait_for_leader(comm, 50ms, [] {
          std::this_thread::sleep_for(200ms);
          throw InputError("the flush failed");
        });
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  CHECK(errors[0].find("the flush failed") != std::string::npos);
  CHECK(errors[1].empty());
}

namespace {

// A communicator with only allreduce_sum and broadcast of its own (Gloo's underneath): the
// reduce-scatter and allgather it offers are Communicator's defaults.
struct DefaultsOnly final : Communicator {
  explicit DefaultsOnly(GlooCommunicator& inner) : gloo(inner) {}
  int rank() const override { return gloo.rank(); }
  int size() const override { return gloo.size(); }
  void allreduce_sum(FloatSpan data) override { gloo.allreduce_sum(data); }
  void broadcast(FloatSpan data, int root) override { gloo.broadcast(data, root); }
  GlooCommunicator& gloo;
};

// Rank r's value at i: (r + 1) (i % 1000); the sum over 3 ranks is 6 (i % 1000), exact in fp32.
float value(int rank, size_t i) { return static_cast<float>((rank + 1) * (i % 1000)); }

}  // namespace

TEST_CASE(
    "reduce-scatter sums each rank's range, in pieces, and allgather copies every range "
    "back: Gloo's and the defaults alike") {
  // Rank 0's range spans two pieces (kPieceElements = 262144), rank 1's is empty.
  const std::vector<uint64_t> counts{300000, 0, 270001};
  const uint64_t total = 570001;
  for (bool defaults : {false, true}) {
    CAPTURE(defaults);
    std::mutex mu;
    std::vector<std::vector<float>> gathered(3);
    run_ranks(3, [&](GlooCommunicator& gloo) {
      DefaultsOnly fallback(gloo);
      Communicator& comm = defaults ? static_cast<Communicator&>(fallback) : gloo;
      const int r = comm.rank();
      std::vector<float> x(total);
      for (size_t i = 0; i < x.size(); ++i) x[i] = value(r, i);
      comm.reduce_scatter_sum(x, counts);
      const uint64_t begin = r == 0 ? 0 : 300000;
      for (uint64_t i = begin; i < begin + counts[r]; ++i)
        REQUIRE(x[i] == 6.0f * static_cast<float>(i % 1000));
      // Each rank's range now marked with its rank, then gathered.
      for (uint64_t i = begin; i < begin + counts[r]; ++i) x[i] = static_cast<float>(r) + 0.5f;
      comm.allgather(x, counts);
      std::lock_guard lock(mu);
      gathered[r] = x;
    });
    for (int r = 0; r < 3; ++r) {
      CHECK(gathered[r][0] == 0.5f);
      CHECK(gathered[r][299999] == 0.5f);
      CHECK(gathered[r][300000] == 2.5f);
      CHECK(gathered[r][total - 1] == 2.5f);
      CHECK(gathered[r] == gathered[0]);
    }
  }
  run_ranks(2, [&](GlooCommunicator& comm) {
    std::vector<float> x(10);
    const std::vector<uint64_t> wrong{5, 4};
    CHECK_THROWS_WITH_AS(comm.reduce_scatter_sum(x, wrong), doctest::Contains("add up to 9"),
                         InputError);
    CHECK_THROWS_WITH_AS(comm.allgather(x, std::vector<uint64_t>{10}),
                         doctest::Contains("1 shard counts for a group of 2"), InputError);
  });
}

TEST_CASE("with two ranks, reduce-scatter gives each range the bits AllReduce gives it") {
  std::mutex mu;
  std::vector<std::vector<float>> reduced(2), scattered(2);
  run_ranks(2, [&](GlooCommunicator& comm) {
    uint64_t state = 17 + static_cast<uint64_t>(comm.rank());
    std::vector<float> x(100001);
    for (float& v : x)
      v = static_cast<float>(splitmix64(state) % 1000003) / 7919.0f - 60.0f;  // inexact sums
    std::vector<float> y = x;
    comm.allreduce_sum(x);
    comm.reduce_scatter_sum(y, std::vector<uint64_t>{50000, 50001});
    std::lock_guard lock(mu);
    reduced[comm.rank()] = x;
    scattered[comm.rank()] = y;
  });
  CHECK(std::equal(scattered[0].begin(), scattered[0].begin() + 50000, reduced[0].begin()));
  CHECK(std::equal(scattered[1].begin() + 50000, scattered[1].end(), reduced[1].begin() + 50000));
}
