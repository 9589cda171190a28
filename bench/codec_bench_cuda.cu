// CUDA half of `geotrain bench codecs`: every dense codec's fused kernels on device buffers,
// timed with CUDA events (best of `repeats`), against cudaMemcpyAsync device-to-device of the
// same fp32 buffer. Bandwidth arithmetic for the fused EF encode: it reads g and e and writes e
// and the body, 12 + bits/8 bytes per element, against the copy's 8 (read + write).
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/codec_bench_cuda.hpp"
#include "compression/codecs.hpp"
#include "compression/payload.hpp"
#include "core/check_cuda.hpp"
#include "kernels/codec_cuda.cuh"
#include "kernels/qtopk_cuda.cuh"
#include "kernels/topk_cuda.cuh"

namespace geotrain::bench {
namespace {

namespace kc = geotrain::kernels;

struct Buffer {
  void* ptr = nullptr;
  explicit Buffer(size_t bytes) { GT_CUDA_CHECK(cudaMalloc(&ptr, bytes < 1 ? 1 : bytes)); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { cudaFree(ptr); }
  template <typename T>
  T* as() {
    return static_cast<T*>(ptr);
  }
};

struct Events {
  cudaEvent_t start, stop;
  Events() {
    GT_CUDA_CHECK(cudaEventCreate(&start));
    GT_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  template <typename F>
  double best_seconds(int repeats, F&& f) {
    f();
    GT_CUDA_CHECK(cudaDeviceSynchronize());
    float best = 1e30f;
    for (int r = 0; r < repeats; ++r) {
      GT_CUDA_CHECK(cudaEventRecord(start));
      f();
      GT_CUDA_CHECK(cudaEventRecord(stop));
      GT_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      GT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      best = ms < best ? ms : best;
    }
    return best / 1e3;
  }
};

double rel_error(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += double(a[i] - ref[i]) * double(a[i] - ref[i]);
    den += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(num / den);
}

// The device buffers of one bench: the gradient g, the residual e, a copy target, the decoded y
// and the body (scales, then the packed codes, for the chunked codecs).
struct Buffers {
  size_t n;
  Buffer g, e, copy, y, body;
  explicit Buffers(size_t n)
      : n(n), g(4 * n), e(4 * n), copy(4 * n), y(4 * n), body(4 * n + 4 * n / 32 + 64) {}
  float* scales() { return body.as<float>(); }
  std::byte* packed(uint32_t chunk) { return body.as<std::byte>() + 4 * kc::chunk_count(n, chunk); }
};

// One codec's kernels. `encode` takes the residual (nullptr: no error feedback); `after_encode`,
// when set, prepares the decode from the body just written and returns the bits per element
// (top-k: its size depends on the data).
struct Case {
  std::string name;
  double bits;
  std::function<void(float*)> encode;
  std::function<void()> decode;
  std::function<double()> after_encode;
};

std::vector<Case> dense_cases(Buffers& b, uint32_t chunk) {
  const size_t n = b.n;
  float* g = b.g.as<float>();
  float* y = b.y.as<float>();
  float* scales = b.scales();
  std::byte* packed = b.packed(chunk);
  auto* p8 = reinterpret_cast<uint8_t*>(packed);
  auto* s8 = reinterpret_cast<int8_t*>(packed);
  auto* p32 = reinterpret_cast<uint32_t*>(packed);
  auto* h16 = b.body.as<uint16_t>();
  float* f32 = b.body.as<float>();
  const kc::Rounding nearest{};
  const double scale_bits = 32.0 / chunk;
  return {
      {"fp32", 32, [=](float* e) { kc::cuda::fp32_encode(g, e, n, f32, 0); },
       [=] { kc::cuda::fp32_decode(f32, n, y, false, 0); }},
      {"fp16", 16, [=](float* e) { kc::cuda::fp16_encode(g, e, n, h16, 0); },
       [=] { kc::cuda::fp16_decode(h16, n, y, false, 0); }},
      {"bf16", 16, [=](float* e) { kc::cuda::bf16_encode(g, e, n, h16, 0); },
       [=] { kc::cuda::bf16_decode(h16, n, y, false, 0); }},
      {"int8", 8 + scale_bits,
       [=](float* e) { kc::cuda::int8_encode(g, e, n, chunk, nearest, scales, s8, 0); },
       [=] { kc::cuda::int8_decode(scales, s8, n, chunk, y, false, 0); }},
      {"int4", 4 + scale_bits,
       [=](float* e) { kc::cuda::int4_encode(g, e, n, chunk, nearest, scales, p8, 0); },
       [=] { kc::cuda::int4_decode(scales, p8, n, chunk, y, false, 0); }},
      {"fp4", 4 + scale_bits,
       [=](float* e) { kc::cuda::fp4_encode(g, e, n, chunk, scales, p8, 0); },
       [=] { kc::cuda::fp4_decode(scales, p8, n, chunk, y, false, 0); }},
      {"onebit", 1 + scale_bits,
       [=](float* e) { kc::cuda::onebit_encode(g, e, n, chunk, scales, p32, 0); },
       [=] { kc::cuda::onebit_decode(scales, p32, n, chunk, y, false, 0); }},
  };
}

// top-k at 1%: the body's length depends on the data, and the decode scatters indices that the
// host parsed from the last body, as a receiver does (compression::topk_indices).
Case topk_case(Buffers& b, Buffer& indices, uint64_t k) {
  const size_t n = b.n;
  auto body_bytes = std::make_shared<size_t>(0);
  return {"topk:ratio=0.01", 0,
          [&b, n, k, body_bytes](float* e) {
            *body_bytes =
                kc::cuda::topk_encode(b.g.as<float>(), e, n, k, 4096, b.body.as<std::byte>(), 0);
          },
          [&b, &indices, n, k] {
            kc::cuda::topk_decode(b.body.as<float>(), indices.as<uint32_t>(), k, n, b.y.as<float>(),
                                  false, 0);
          },
          [&b, &indices, n, k, body_bytes] {
            std::vector<std::byte> body(*body_bytes);
            GT_CUDA_CHECK(cudaMemcpy(body.data(), b.body.ptr, body.size(), cudaMemcpyDeviceToHost));
            const std::vector<uint64_t> wide = compression::topk_indices(body, k, n);
            const std::vector<uint32_t> index(wide.begin(), wide.end());
            GT_CUDA_CHECK(cudaMemcpy(indices.ptr, index.data(), 4 * k, cudaMemcpyHostToDevice));
            return 8.0 * double(body.size() + compression::kHeaderBytes) / double(n);
          }};
}

// top-k with 2-bit values at 2% per chunk: a fixed layout, decoded on the device.
Case qtopk_case(Buffers& b, uint32_t chunk) {
  const kc::QtopkLayout layout{b.n, chunk, uint32_t(compression::topk_count(chunk, 0.02)), 2};
  float* g = b.g.as<float>();
  float* y = b.y.as<float>();
  float* scales = b.scales();
  auto* values = b.body.as<uint8_t>() + layout.values_offset();
  auto* indices = b.body.as<uint8_t>() + layout.indices_offset();
  const double bits = 8.0 * double(layout.body_bytes() + compression::kHeaderBytes) / double(b.n);
  return {"topk:ratio=0.02,bits=2", bits,
          [=](float* e) { kc::cuda::qtopk_encode(g, e, layout, scales, values, indices, 0); },
          [=] { kc::cuda::qtopk_decode(layout, scales, values, indices, y, false, 0); }};
}

// One row: the case's encode (with or without error feedback) and decode timed, its error
// against g (with EF: the residual left after the repeats, per encode), and the bandwidths
// against the device copy of the same buffer (`copy_s`).
CodecResult measure(Case& c, bool ef, Buffers& b, const std::vector<float>& g, Events& ev,
                    int repeats, double copy_s) {
  const size_t n = b.n;
  GT_CUDA_CHECK(cudaMemset(b.e.ptr, 0, 4 * n));
  CodecResult r;
  r.name = c.name;
  r.path = "cuda";
  r.data = "gaussian";
  r.error_feedback = ef;
  const double enc_s = ev.best_seconds(repeats, [&] { c.encode(ef ? b.e.as<float>() : nullptr); });
  // After the encode: top-k's size is known only from the body it wrote (issue 11: the row
  // without EF used to report the 0 it started from).
  if (c.after_encode) c.bits = c.after_encode();
  r.bits_per_element = c.bits;
  const double dec_s = ev.best_seconds(repeats, [&] { c.decode(); });
  if (ef) {
    std::vector<float> e(n);
    GT_CUDA_CHECK(cudaMemcpy(e.data(), b.e.ptr, 4 * n, cudaMemcpyDeviceToHost));
    double en = 0, gn = 0;
    for (size_t i = 0; i < n; ++i) en += double(e[i]) * e[i], gn += double(g[i]) * g[i];
    r.rel_error = std::sqrt(en / gn) / (repeats + 1);
  } else {
    std::vector<float> y(n);
    GT_CUDA_CHECK(cudaMemcpy(y.data(), b.y.ptr, 4 * n, cudaMemcpyDeviceToHost));
    r.rel_error = rel_error(y, g);
  }
  r.encode_gbps = 4.0 * double(n) / enc_s / 1e9;
  r.decode_gbps = 4.0 * double(n) / dec_s / 1e9;
  r.encode_vs_memcpy = enc_s / copy_s;
  r.decode_vs_memcpy = dec_s / copy_s;
  // bytes moved per element: read g (+ read and write e), write the body
  const double moved = double(n) * ((ef ? 12.0 : 4.0) + c.bits / 8.0);
  r.encode_bandwidth_vs_copy = (moved / enc_s) / (8.0 * double(n) / copy_s);
  return r;
}

}  // namespace

CudaBenchReport run_cuda_codec_bench(std::size_t n, int repeats) {
  CudaBenchReport report;
  if (kc::cuda::device_count() == 0) {
    report.note = "no CUDA device present: the CUDA path was built but not run";
    return report;
  }
  cudaDeviceProp prop{};
  GT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  report.device = prop.name;

  std::vector<float> g(n);
  fill_gradient_like(g, "gaussian", 42);
  Buffers b(n);
  GT_CUDA_CHECK(cudaMemcpy(b.g.ptr, g.data(), 4 * n, cudaMemcpyHostToDevice));
  Events ev;
  const double copy_s = ev.best_seconds(repeats, [&] {
    GT_CUDA_CHECK(cudaMemcpyAsync(b.copy.ptr, b.g.ptr, 4 * n, cudaMemcpyDeviceToDevice));
  });
  report.copy_gbps = 4.0 * double(n) / copy_s / 1e9;

  const uint32_t chunk = compression::kDefaultChunk;
  const uint64_t k = compression::topk_count(n, 0.01);
  Buffer topk_indices(4 * k);
  std::vector<Case> cases = dense_cases(b, chunk);
  cases.push_back(topk_case(b, topk_indices, k));
  cases.push_back(qtopk_case(b, chunk));
  for (auto& c : cases) {
    for (bool ef : {false, true})
      report.results.push_back(measure(c, ef, b, g, ev, repeats, copy_s));
  }
  report.ran = true;
  report.note.clear();
  return report;
}

}  // namespace geotrain::bench
