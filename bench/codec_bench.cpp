#include "bench/codec_bench.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "bench/codec_bench_cuda.hpp"
#include "compression/codec.hpp"
#include "compression/error_feedback.hpp"
#include "compression/factory.hpp"
#include "core/log.hpp"

namespace geotrain::bench {
namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double best_seconds(int repeats, F&& f) {
  f();  // warm-up: page faults, caches, lazily sized scratch buffers
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * double(x);
  return std::sqrt(s);
}

}  // namespace

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

namespace {

CodecResult measure_cpu(const std::string& spec, const std::vector<float>& g,
                        const std::string& data, bool ef, int repeats, double memcpy_s) {
  const size_t n = g.size();
  CodecResult r;
  r.name = spec;
  r.path = "cpu";
  r.data = data;
  r.error_feedback = ef;
  std::vector<float> y(n);
  Bytes payload;
  double encode_s;
  // A codec that factorises matrices (powersgd) sees the data as rows of 1024.
  const compression::MatrixShape shape =
      n % 1024 == 0 ? compression::MatrixShape{n / 1024, 1024} : compression::MatrixShape{};
  if (ef) {
    compression::ErrorFeedback feedback(compression::make_codec(spec));
    encode_s = best_seconds(repeats, [&] { feedback.encode(0, g, payload, shape); });
    // Accumulated error after R = repeats + 1 encodes of the same g: ||e_R|| / ||R g||.
    std::vector<float> e(feedback.residual(0).begin(), feedback.residual(0).end());
    r.rel_error = norm(e) / (norm(g) * (repeats + 1));
  } else {
    auto codec = compression::make_codec(spec);
    encode_s = best_seconds(repeats, [&] { codec->encode_matrix(g, shape, 0, payload); });
  }
  auto decoder = compression::make_codec(spec);
  const double decode_s = best_seconds(repeats, [&] { decoder->decode(payload, y); });
  if (!ef) {
    std::vector<float> diff(n);
    for (size_t i = 0; i < n; ++i) diff[i] = y[i] - g[i];
    r.rel_error = norm(diff) / norm(g);
  }
  r.bits_per_element = 8.0 * double(payload.size()) / double(n);
  r.encode_gbps = 4.0 * double(n) / encode_s / 1e9;
  r.decode_gbps = 4.0 * double(n) / decode_s / 1e9;
  r.encode_vs_memcpy = encode_s / memcpy_s;
  r.decode_vs_memcpy = decode_s / memcpy_s;
  return r;
}

nlohmann::json to_json(const CodecResult& r) {
  return {{"name", r.name},
          {"path", r.path},
          {"data", r.data},
          {"error_feedback", r.error_feedback},
          {"bits_per_element", r.bits_per_element},
          {"encode_gbps", r.encode_gbps},
          {"decode_gbps", r.decode_gbps},
          {"encode_vs_memcpy", r.encode_vs_memcpy},
          {"decode_vs_memcpy", r.decode_vs_memcpy},
          {"rel_error", r.rel_error},
          {"encode_bandwidth_vs_copy", r.encode_bandwidth_vs_copy}};
}

void print_table(const std::vector<CodecResult>& results, double memcpy_gbps,
                 const std::string& path) {
  fmt::print("\n{} path; copy reference {:.2f} GB/s (fp32 bytes per second)\n", path, memcpy_gbps);
  fmt::print("{:<24} {:<13} {:>3} {:>9} {:>9} {:>9} {:>8} {:>8} {:>10}\n", "codec", "data", "EF",
             "bits/elt", "enc GB/s", "dec GB/s", "enc/cpy", "dec/cpy", "rel.err");
  for (const auto& r : results) {
    if (r.path != path) continue;
    fmt::print("{:<24} {:<13} {:>3} {:>9.3f} {:>9.2f} {:>9.2f} {:>8.2f} {:>8.2f} {:>10.2e}\n",
               r.name, r.data, r.error_feedback ? "yes" : "no", r.bits_per_element, r.encode_gbps,
               r.decode_gbps, r.encode_vs_memcpy, r.decode_vs_memcpy, r.rel_error);
  }
}

}  // namespace

void fill_gradient_like(std::vector<float>& data, const std::string& kind, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  if (kind == "gaussian") {
    for (float& x : data) x = normal(rng);
  } else {
    std::student_t_distribution<float> t(3.0f);
    for (float& x : data) x = 1e-3f * t(rng);
  }
}

int run_codec_bench(const CodecBenchOptions& options) {
  const size_t n = options.elements;
  const auto specs = options.specs.empty() ? compression::standard_codec_specs() : options.specs;
  for (const auto& s : specs) compression::make_codec(s);  // reject bad specs before measuring

  std::vector<float> src(n), dst(n);
  fill_gradient_like(src, "gaussian", 1);
  const double memcpy_s = best_seconds(
      options.repeats, [&] { std::memcpy(dst.data(), src.data(), n * sizeof(float)); });
  const double memcpy_gbps = 4.0 * double(n) / memcpy_s / 1e9;

  std::vector<CodecResult> results;
  const size_t total = specs.size() * 4;
  for (const std::string data : {"gaussian", "heavy_tailed"}) {
    if (options.skip_cpu) break;
    std::vector<float> g(n);
    fill_gradient_like(g, data, 42);
    for (const auto& spec : specs) {
      for (bool ef : {false, true}) {
        if (!options.json)
          spdlog::info("[{}/{}] cpu {} {} {}", results.size() + 1, total, spec, data,
                       ef ? "EF" : "");
        results.push_back(measure_cpu(spec, g, data, ef, options.repeats, memcpy_s));
      }
    }
  }

  CudaBenchReport cuda;
  if (!options.skip_gpu) cuda = run_cuda_codec_bench(n, options.repeats);
  results.insert(results.end(), cuda.results.begin(), cuda.results.end());

  if (options.json) {
    nlohmann::json doc;
    doc["device"] = cpu_name();
    doc["elements"] = n;
    doc["memcpy_gbps"] = memcpy_gbps;
    doc["repeats"] = options.repeats;
    if (cuda.ran) {
      doc["cuda_device"] = cuda.device;
      doc["cuda_copy_gbps"] = cuda.copy_gbps;
    } else {
      doc["cuda_device"] = nullptr;
      doc["cuda_note"] = cuda.note;
    }
    doc["codecs"] = nlohmann::json::array();
    for (const auto& r : results) doc["codecs"].push_back(to_json(r));
    fmt::print("{}\n", doc.dump(2));
  } else {
    fmt::print("geotrain bench codecs: {} elements ({:.1f} MiB fp32), best of {} runs, on {}\n", n,
               4.0 * double(n) / (1 << 20), options.repeats, cpu_name());
    if (!options.skip_cpu) print_table(results, memcpy_gbps, "cpu");
    if (cuda.ran)
      print_table(results, cuda.copy_gbps, "cuda");
    else
      fmt::print("\ncuda path: {}\n", cuda.note);
  }
  return 0;
}

}  // namespace geotrain::bench
