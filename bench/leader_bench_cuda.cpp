// `geotrain bench leader` with CUDA: see leader_bench.hpp.
#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "bench/codec_bench.hpp"
#include "bench/leader_bench.hpp"
#include "compression/codec.hpp"
#include "compression/device_feedback.hpp"
#include "compression/error_feedback.hpp"
#include "compression/factory.hpp"
#include "core/check_cuda.hpp"
#include "core/device_buffer.hpp"
#include "kernels/codec_cuda.cuh"

namespace geotrain::bench {
namespace {

namespace cx = geotrain::compression;
using Clock = std::chrono::steady_clock;

struct Segment {
  uint64_t offset, count;
};

struct LeaderResult {
  std::string codec;
  uint64_t payload_bytes = 0;
  double host_push_s = 0, device_push_s = 0, host_pull_s = 0, device_pull_s = 0;
  bool identical = true;  // every round's payloads, host against device
};

template <typename F>
double seconds(F&& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One codec: `repeats` rounds of both paths on the same local and base (best time of each).
LeaderResult measure(const std::string& spec, const LeaderBenchOptions& o,
                     const std::vector<Segment>& segments, const DeviceBuffer<float>& d_local,
                     const std::vector<float>& base) {
  const uint64_t n = o.elements;
  LeaderResult r{spec};
  r.host_push_s = r.device_push_s = r.host_pull_s = r.device_pull_s = 1e30;
  cx::ErrorFeedback host_ef(cx::make_codec(spec));
  cx::DeviceFeedback device_ef(spec);
  cx::DeviceDecoder decoder;
  std::vector<float> local(n), delta(n), host_base = base;
  DeviceBuffer<float> d_base(n), d_delta(n), d_params(n);
  d_base.upload(base);
  std::vector<Bytes> host_payloads(segments.size()), device_payloads(segments.size());
  for (int rep = 0; rep < o.repeats; ++rep) {
    const double host_push = seconds([&] {
      d_local.download(local);  // the trainer's to_host (pageable, as its params are)
      for (uint64_t j = 0; j < n; ++j) delta[j] = local[j] - host_base[j];
      for (size_t s = 0; s < segments.size(); ++s)
        host_ef.encode(s, ConstFloatSpan(delta).subspan(segments[s].offset, segments[s].count),
                       host_payloads[s]);
    });
    const double device_push = seconds([&] {
      kernels::cuda::subtract(d_local.get(), d_base.get(), n, d_delta.get(), nullptr);
      for (size_t s = 0; s < segments.size(); ++s)
        device_ef.encode(s, d_delta.get() + segments[s].offset, segments[s].count,
                         device_payloads[s]);
    });
    r.identical = r.identical && host_payloads == device_payloads;
    // The pull: the payloads pushed stand in for the server's reply (the same codec and sizes).
    const double host_pull = seconds([&] {
      for (size_t s = 0; s < segments.size(); ++s)
        cx::decode_add_payload(host_payloads[s],
                               FloatSpan(host_base).subspan(segments[s].offset, segments[s].count));
      d_params.upload(local);  // the trainer's to_device after the merge
    });
    const double device_pull = seconds([&] {
      for (size_t s = 0; s < segments.size(); ++s)
        decoder.decode_add(device_payloads[s], d_base.get() + segments[s].offset,
                           segments[s].count);
    });
    r.host_push_s = std::min(r.host_push_s, host_push);
    r.device_push_s = std::min(r.device_push_s, device_push);
    r.host_pull_s = std::min(r.host_pull_s, host_pull);
    r.device_pull_s = std::min(r.device_pull_s, device_pull);
  }
  for (const auto& p : device_payloads) r.payload_bytes += p.size();
  return r;
}

}  // namespace

int run_leader_bench(const LeaderBenchOptions& o) {
  if (kernels::cuda::device_count() == 0)
    return leader_bench_unavailable("no CUDA device present: the CUDA path was built but not run",
                                    o.json);
  cudaDeviceProp prop{};
  GT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const uint64_t n = o.elements;
  std::vector<Segment> segments;
  for (uint64_t s = 0; s < o.segments; ++s) {
    const uint64_t begin = n * s / o.segments, end = n * (s + 1) / o.segments;
    segments.push_back({begin, end - begin});
  }
  // The global parameters, and this round's local ones a small step away from them.
  std::vector<float> base(n), step(n);
  fill_gradient_like(base, "gaussian", 1);
  fill_gradient_like(step, "heavy_tailed", 2);
  for (uint64_t j = 0; j < n; ++j) step[j] = base[j] * 20.0f + step[j];
  DeviceBuffer<float> d_local(n);
  d_local.upload(step);
  for (uint64_t j = 0; j < n; ++j) base[j] *= 20.0f;

  std::vector<LeaderResult> results;
  for (const auto& spec : o.codecs) {
    if (!o.json)
      spdlog::info("leader push and pull: {} ({} elements, {} segments)", spec, n, o.segments);
    results.push_back(measure(spec, o, segments, d_local, base));
  }
  bool identical = true;
  for (const auto& r : results) identical = identical && r.identical;
  if (o.json) {
    nlohmann::json doc{{"cuda_device", prop.name}, {"host", cpu_name()},   {"elements", n},
                       {"segments", o.segments},   {"repeats", o.repeats}, {"codecs", nullptr}};
    doc["codecs"] = nlohmann::json::array();
    for (const auto& r : results)
      doc["codecs"].push_back({{"codec", r.codec},
                               {"payload_bytes", r.payload_bytes},
                               {"host_push_s", r.host_push_s},
                               {"device_push_s", r.device_push_s},
                               {"push_speedup", r.host_push_s / r.device_push_s},
                               {"host_pull_s", r.host_pull_s},
                               {"device_pull_s", r.device_pull_s},
                               {"pull_speedup", r.host_pull_s / r.device_pull_s},
                               {"identical", r.identical}});
    fmt::print("{}\n", doc.dump(2));
  } else {
    fmt::print("geotrain bench leader: {} elements in {} segments, best of {}, {} on {}\n", n,
               o.segments, o.repeats, prop.name, cpu_name());
    fmt::print("{:<22} {:>12} {:>10} {:>10} {:>8} {:>10} {:>10} {:>8} {:>9}\n", "codec",
               "payload MB", "host push", "dev push", "x", "host pull", "dev pull", "x", "same");
    for (const auto& r : results)
      fmt::print(
          "{:<22} {:>12.2f} {:>9.1f}ms {:>8.1f}ms {:>8.1f} {:>8.1f}ms {:>8.1f}ms {:>8.1f} "
          "{:>9}\n",
          r.codec, static_cast<double>(r.payload_bytes) / 1e6, r.host_push_s * 1e3,
          r.device_push_s * 1e3, r.host_push_s / r.device_push_s, r.host_pull_s * 1e3,
          r.device_pull_s * 1e3, r.host_pull_s / r.device_pull_s, r.identical ? "yes" : "NO");
  }
  return identical ? 0 : 1;
}

}  // namespace geotrain::bench
