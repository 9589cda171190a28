// GPU suite (labels worker, gpu): the leader's parameters on the device (DeviceLeaderParams,
// worker/leader/device_leader_params.hpp) against the host's (HostLeaderParams over OverlapMerge),
// bit for bit: every overlap mode, with and without the servers' momentum and Nesterov, over
// several rounds of starts and merges on two fragments, blocking results taken in between, and the
// hand over to the host at the end of a run.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/device_buffer.hpp"
#include "worker/leader/device_leader_params.hpp"
#include "worker/leader/leader_params.hpp"

using namespace geotrain;
using namespace geotrain::worker;

namespace {

std::vector<float> noise(size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> download(const DeviceBuffer<float>& d) {
  std::vector<float> h(d.size());
  d.download(h);
  return h;
}

struct Case {
  OverlapMode mode;
  OuterStepConfig outer;
};

}  // namespace

TEST_CASE("the overlap rule on the device gives the host's parameters and pushes, bit for bit") {
  constexpr size_t n = 10'007;  // odd: the kernels' last block is partial
  const std::vector<ElementRange> fragments{{0, 4'096}, {4'096, n - 4'096}};
  const Case cases[] = {
      {OverlapMode::carry, {0.7f, 0.9f, false}},   {OverlapMode::eager, {0.7f, 0.0f, false}},
      {OverlapMode::eager, {0.7f, 0.9f, false}},   {OverlapMode::eager, {0.7f, 0.9f, true}},
      {OverlapMode::delayed, {0.8f, 0.0f, false}}, {OverlapMode::delayed, {0.7f, 0.9f, true}},
  };
  for (const auto& c : cases) {
    CAPTURE(overlap_mode_name(c.mode));
    CAPTURE(c.outer.momentum);
    CAPTURE(c.outer.nesterov);
    std::mt19937 rng(7);
    const std::vector<float> global0 = noise(n, 1.0f, rng);
    std::vector<float> x = global0;
    DeviceBuffer<float> x_dev(n);
    x_dev.upload(x);
    int changed = 0;
    HostLeaderParams host(std::make_unique<OverlapMerge>(c.mode, c.outer, 3, global0));
    host.bind(x);
    DeviceLeaderParams device(
        x_dev.get(), n, nullptr, [&] { ++changed; }, c.mode, c.outer, 3, global0);
    std::vector<float> push_h(n), push_d(n), read_d(n);
    std::vector<float> global = global0;
    for (int round = 0; round < 4; ++round) {
      CAPTURE(round);
      for (const auto& r : fragments) {
        // Training moves the parameters (the same on both sides), then the exchange starts.
        const auto step = noise(n, 0.01f, rng);
        for (uint64_t j = r.offset; j < r.end(); ++j) x[j] += step[j];
        x_dev.upload(x);
        host.start(r, push_h);
        device.start(r, push_d);
        CHECK(same_bits(push_h, push_d));
        device.commit();
        CHECK(same_bits(download(x_dev), x));
        // More training while it is on the WAN, then the global values come back.
        const auto more = noise(n, 0.01f, rng);
        for (uint64_t j = r.offset; j < r.end(); ++j) x[j] += more[j];
        x_dev.upload(x);
        const auto moved = noise(n, 0.05f, rng);
        for (uint64_t j = r.offset; j < r.end(); ++j) global[j] += moved[j];
        host.merge(r, global);
        device.merge(r, global);
        device.commit();
        CHECK(same_bits(download(x_dev), x));
      }
      if (round == 1) {  // a blocking exchange of the first fragment (the critical one's way)
        device.read(fragments[0], read_d);
        CHECK(std::memcmp(read_d.data(), x.data(), fragments[0].count * sizeof(float)) == 0);
        const auto moved = noise(n, 0.05f, rng);
        for (uint64_t j = 0; j < fragments[0].count; ++j) global[j] += moved[j];
        host.take_global(fragments[0], global);
        device.take_global(fragments[0], global);
        device.commit();
        CHECK(same_bits(download(x_dev), x));
      }
    }
    // commit() after a change only: a start and a merge of 2 fragments in 4 rounds, and the take.
    CHECK(changed == 17);
    device.commit();
    CHECK(changed == 17);
    // The end of a run: the device hands its rule to the host, which goes on as the host's own.
    std::vector<float> x_from_device(n);
    auto rule = device.to_host(x_from_device);
    REQUIRE(rule != nullptr);
    CHECK(same_bits(x_from_device, x));
    HostLeaderParams handed(std::move(rule));
    handed.bind(x_from_device);
    for (const auto& r : fragments) {
      host.start(r, push_h);
      handed.start(r, push_d);
      for (uint64_t j = r.offset; j < r.end(); ++j) global[j] += 0.01f;
      host.merge(r, global);
      handed.merge(r, global);
    }
    CHECK(same_bits(push_h, push_d));
    CHECK(same_bits(x_from_device, x));
  }
}
