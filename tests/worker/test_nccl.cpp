// GPU suite (labels worker, gpu): NcclCommunicator on device buffers and the CUDA model backend
// against the CPU backend. Ranks are threads of one process with the rendezvous over Gloo's
// in-memory HashStore (gloo's test style); closed-form sums. Two-rank cases need two devices
// (NCCL allows one rank per device) and say so when they cannot run.
// Tolerance for the backends: relative 1e-4 on the loss and on every gradient element (scaled by
// max(1e-3, |cpu|)), as in tests/models/test_mlp_cuda.cpp: fp32 both ways, different summation
// orders, default cuBLAS math (no TF32).
#include <doctest/doctest.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "models/device_buffer.hpp"
#include "models/mlp.hpp"
#include "ranks.hpp"
#include "worker/cuda_model_backend.hpp"
#include "worker/model_backend.hpp"
#include "worker/nccl_communicator.hpp"

using namespace geotrain;
using namespace geotrain::worker;
using models::DeviceBuffer;

namespace {

void run_ranks(int size, const std::function<void(NcclCommunicator&)>& body) {
  test::run_ranks<NcclCommunicator>(size, "nccl/test/", body);
}

std::vector<float> download(const DeviceBuffer<float>& d) {
  std::vector<float> h(d.size());
  d.download(h);
  return h;
}

Batch random_batch(const models::MlpConfig& config, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Batch b;
  b.size = n;
  b.x.resize(n * config.inputs);
  for (float& v : b.x) v = u(rng);
  b.y.resize(n);
  for (size_t i = 0; i < n; ++i) b.y[i] = static_cast<int32_t>((i * 7 + seed) % config.classes);
  return b;
}

double worst_relative(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(double(got[i]) - double(want[i])) /
                                std::max(1e-3, std::abs(double(want[i]))));
  return worst;
}

}  // namespace

TEST_CASE(
    "one NCCL rank: allreduce of a device buffer leaves it unchanged, and so does broadcast") {
  run_ranks(1, [](NcclCommunicator& comm) {
    CHECK(comm.rank() == 0);
    CHECK(comm.size() == 1);
    std::vector<float> x(1000);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * static_cast<float>(i);
    DeviceBuffer<float> d(x.size());
    d.upload(x);
    comm.allreduce_sum({d.get(), d.size()});
    CHECK(download(d) == x);
    comm.broadcast({d.get(), d.size()}, 0);
    CHECK(download(d) == x);
  });
}

TEST_CASE(
    "two NCCL ranks as threads allreduce to the closed-form sum and broadcast the root's values") {
  if (cuda_device_count() < 2) {
    MESSAGE("fewer than 2 CUDA devices: the two-rank NCCL case cannot run here");
    return;
  }
  std::mutex mu;
  std::vector<std::vector<float>> sums(2), bcasts(2);
  run_ranks(2, [&](NcclCommunicator& comm) {
    const int r = comm.rank();
    std::vector<float> x(100000);  // several NCCL chunks
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<float>(r + 1) * static_cast<float>(i % 1000);
    DeviceBuffer<float> d(x.size());  // on comm.device(): the constructor made it current
    d.upload(x);
    comm.allreduce_sum({d.get(), d.size()});  // (1 + 2) (i mod 1000)
    std::vector<float> b(10, static_cast<float>(r));
    DeviceBuffer<float> db(b.size());
    db.upload(b);
    comm.broadcast({db.get(), db.size()}, 1);
    std::lock_guard lock(mu);
    sums[r] = download(d);
    bcasts[r] = download(db);
  });
  for (int r = 0; r < 2; ++r) {
    REQUIRE(sums[r].size() == 100000);
    for (size_t i = 0; i < sums[r].size(); i += 997)
      CHECK(sums[r][i] == static_cast<float>(3 * (i % 1000)));
    CHECK(bcasts[r] == std::vector<float>(10, 1.0f));
  }
}

TEST_CASE("the CUDA backend's loss and accumulated gradient match the CPU backend's within 1e-4") {
  for (const models::MlpConfig& config :
       {models::MlpConfig{}, models::MlpConfig{37, {33, 65}, 40}}) {
    models::Mlp layout(config);
    std::vector<float> params(layout.parameter_count());
    layout.init(params, 5);
    CpuModelBackend cpu(std::make_unique<models::Mlp>(config));
    auto gpu = make_cuda_model_backend(config, 0);
    std::vector<float> grad_cpu(params.size(), 0.0f), grad_gpu(params.size(), 0.0f);
    for (uint64_t m = 0; m < 2; ++m) {  // two micro-batches accumulate
      const Batch batch = random_batch(config, m == 0 ? 64 : 17, m + 1);
      const auto rc = cpu.forward_backward(params, batch, grad_cpu);
      const auto rg = gpu->forward_backward(params, batch, grad_gpu);
      CHECK(rg.loss_sum == doctest::Approx(rc.loss_sum).epsilon(1e-4));
      CHECK(rg.correct == rc.correct);
    }
    cpu.reduce_gradient(grad_cpu);
    gpu->reduce_gradient(grad_gpu);
    CHECK(worst_relative(grad_gpu, grad_cpu) < 1e-4);

    // The device accumulator is zero again: the next step starts from nothing.
    const Batch batch = random_batch(config, 8, 9);
    std::vector<float> again_cpu(params.size(), 0.0f), again_gpu(params.size(), 0.0f);
    cpu.forward_backward(params, batch, again_cpu);
    gpu->forward_backward(params, batch, again_gpu);
    gpu->reduce_gradient(again_gpu);
    CHECK(worst_relative(again_gpu, again_cpu) < 1e-4);

    const auto ec = cpu.evaluate(params, view_of(batch));
    const auto eg = gpu->evaluate(params, view_of(batch));
    CHECK(eg.loss_sum == doctest::Approx(ec.loss_sum).epsilon(1e-4));
    CHECK(eg.correct == ec.correct);
  }
}

TEST_CASE(
    "a one-worker NCCL region: the host communicator round-trips and reduce_gradient equals the "
    "CPU's") {
  const models::MlpConfig config{784, {64}, 10};
  models::Mlp layout(config);
  std::vector<float> params(layout.parameter_count());
  layout.init(params, 7);
  gloo::rendezvous::HashStore store;
  auto gpu = make_cuda_model_backend(config, 0);
  auto comm = gpu->connect_region(store, 0, 1, RegionOptions{});
  std::vector<float> host{1.0f, -2.0f, 3.5f};
  comm->allreduce_sum(host);
  CHECK(host == std::vector<float>{1.0f, -2.0f, 3.5f});
  comm->broadcast(host, 0);
  CHECK(host == std::vector<float>{1.0f, -2.0f, 3.5f});

  CpuModelBackend cpu(std::make_unique<models::Mlp>(config));
  const Batch batch = random_batch(config, 32, 3);
  std::vector<float> grad_cpu(params.size(), 0.0f), grad_gpu(params.size(), 0.0f);
  cpu.forward_backward(params, batch, grad_cpu);
  gpu->forward_backward(params, batch, grad_gpu);
  gpu->reduce_gradient(grad_gpu);  // NCCL AllReduce over one rank, in device memory
  CHECK(worst_relative(grad_gpu, grad_cpu) < 1e-4);
}
