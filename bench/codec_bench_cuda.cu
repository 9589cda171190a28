// CUDA half of `geotrain bench codecs`: every dense codec's fused kernels on device buffers,
// timed with CUDA events (best of `repeats`), against cudaMemcpyAsync device-to-device of the
// same fp32 buffer. Bandwidth arithmetic for the fused EF encode: it reads g and e and writes e
// and the body, 12 + bits/8 bytes per element, against the copy's 8 (read + write).
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "bench/codec_bench_cuda.hpp"
#include "compression/codecs.hpp"
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
  Buffer dg(4 * n), de(4 * n), dcopy(4 * n), dy(4 * n), dbody(4 * n + 4 * n / 32 + 64);
  GT_CUDA_CHECK(cudaMemcpy(dg.ptr, g.data(), 4 * n, cudaMemcpyHostToDevice));
  Events ev;
  const double copy_s = ev.best_seconds(repeats, [&] {
    GT_CUDA_CHECK(cudaMemcpyAsync(dcopy.ptr, dg.ptr, 4 * n, cudaMemcpyDeviceToDevice));
  });
  report.copy_gbps = 4.0 * double(n) / copy_s / 1e9;

  const uint32_t chunk = compression::kDefaultChunk;
  const size_t nc = kc::chunk_count(n, chunk);
  float* scales = dbody.as<float>();
  std::byte* packed = dbody.as<std::byte>() + 4 * nc;
  struct Case {
    std::string name;
    double bits;
    std::function<void(float*)> encode;  // residual or nullptr
    std::function<void()> decode;
  };
  const kc::Rounding nearest{};
  std::vector<Case> cases = {
      {"fp32", 32,
       [&](float* e) { kc::cuda::fp32_encode(dg.as<float>(), e, n, dbody.as<float>(), 0); },
       [&] { kc::cuda::fp32_decode(dbody.as<float>(), n, dy.as<float>(), false, 0); }},
      {"fp16", 16,
       [&](float* e) { kc::cuda::fp16_encode(dg.as<float>(), e, n, dbody.as<uint16_t>(), 0); },
       [&] { kc::cuda::fp16_decode(dbody.as<uint16_t>(), n, dy.as<float>(), false, 0); }},
      {"bf16", 16,
       [&](float* e) { kc::cuda::bf16_encode(dg.as<float>(), e, n, dbody.as<uint16_t>(), 0); },
       [&] { kc::cuda::bf16_decode(dbody.as<uint16_t>(), n, dy.as<float>(), false, 0); }},
      {"int8", 8 + 32.0 / chunk,
       [&](float* e) {
         kc::cuda::int8_encode(dg.as<float>(), e, n, chunk, nearest, scales,
                               reinterpret_cast<int8_t*>(packed), 0);
       },
       [&] {
         kc::cuda::int8_decode(scales, reinterpret_cast<int8_t*>(packed), n, chunk, dy.as<float>(),
                               false, 0);
       }},
      {"int4", 4 + 32.0 / chunk,
       [&](float* e) {
         kc::cuda::int4_encode(dg.as<float>(), e, n, chunk, nearest, scales,
                               reinterpret_cast<uint8_t*>(packed), 0);
       },
       [&] {
         kc::cuda::int4_decode(scales, reinterpret_cast<uint8_t*>(packed), n, chunk, dy.as<float>(),
                               false, 0);
       }},
      {"fp4", 4 + 32.0 / chunk,
       [&](float* e) {
         kc::cuda::fp4_encode(dg.as<float>(), e, n, chunk, scales,
                              reinterpret_cast<uint8_t*>(packed), 0);
       },
       [&] {
         kc::cuda::fp4_decode(scales, reinterpret_cast<uint8_t*>(packed), n, chunk, dy.as<float>(),
                              false, 0);
       }},
      {"onebit", 1 + 32.0 / chunk,
       [&](float* e) {
         kc::cuda::onebit_encode(dg.as<float>(), e, n, chunk, scales,
                                 reinterpret_cast<uint32_t*>(packed), 0);
       },
       [&] {
         kc::cuda::onebit_decode(scales, reinterpret_cast<uint32_t*>(packed), n, chunk,
                                 dy.as<float>(), false, 0);
       }},
  };

  // topk at 1%: the body length is data-dependent; decode scatters host-parsed indices.
  const uint64_t k = compression::topk_count(n, 0.01);
  size_t topk_body = 0;
  Buffer dindex(4 * k);
  cases.push_back({"topk:ratio=0.01", 0,
                   [&](float* e) {
                     topk_body = kc::cuda::topk_encode(dg.as<float>(), e, n, k, 4096,
                                                       dbody.as<std::byte>(), 0);
                   },
                   [&] {
                     kc::cuda::topk_decode(dbody.as<float>(), dindex.as<uint32_t>(), k, n,
                                           dy.as<float>(), false, 0);
                   }});

  // topk with 2-bit values at 2% per chunk: a fixed layout, decoded on the device.
  const kc::QtopkLayout qlayout{n, chunk, uint32_t(compression::topk_count(chunk, 0.02)), 2};
  auto* qvalues = dbody.as<uint8_t>() + qlayout.values_offset();
  auto* qindices = dbody.as<uint8_t>() + qlayout.indices_offset();
  cases.push_back(
      {"topk:ratio=0.02,bits=2", 8.0 * double(qlayout.body_bytes() + 40) / double(n),
       [&](float* e) {
         kc::cuda::qtopk_encode(dg.as<float>(), e, qlayout, scales, qvalues, qindices, 0);
       },
       [&] {
         kc::cuda::qtopk_decode(qlayout, scales, qvalues, qindices, dy.as<float>(), false, 0);
       }});

  std::vector<float> y(n);
  for (auto& c : cases) {
    for (bool ef : {false, true}) {
      GT_CUDA_CHECK(cudaMemset(de.ptr, 0, 4 * n));
      CodecResult r;
      r.name = c.name;
      r.path = "cuda";
      r.data = "gaussian";
      r.error_feedback = ef;
      const double enc_s =
          ev.best_seconds(repeats, [&] { c.encode(ef ? de.as<float>() : nullptr); });
      if (c.name.rfind("topk", 0) == 0) {
        // Parse the varints of the last body on the host, as the receiving decoder would.
        std::vector<uint8_t> body(topk_body);
        GT_CUDA_CHECK(cudaMemcpy(body.data(), dbody.ptr, topk_body, cudaMemcpyDeviceToHost));
        std::vector<uint32_t> index(k);
        size_t p = 4 * k;
        uint32_t prev = 0;
        for (uint64_t j = 0; j < k; ++j) {
          uint32_t v = 0;
          for (unsigned shift = 0;; shift += 7) {
            v |= uint32_t(body[p] & 0x7f) << shift;
            if (!(body[p++] & 0x80)) break;
          }
          index[j] = prev = (j == 0 ? v : prev + v);
        }
        GT_CUDA_CHECK(cudaMemcpy(dindex.ptr, index.data(), 4 * k, cudaMemcpyHostToDevice));
        c.bits = 8.0 * double(topk_body + 40) / double(n);
      }
      // After the encode: topk's size is only known from the body it wrote (issue 11: the row
      // without EF used to report the 0 it started from).
      r.bits_per_element = c.bits;
      const double dec_s = ev.best_seconds(repeats, [&] { c.decode(); });
      GT_CUDA_CHECK(cudaMemcpy(y.data(), dy.ptr, 4 * n, cudaMemcpyDeviceToHost));
      if (ef) {
        std::vector<float> e(n);
        GT_CUDA_CHECK(cudaMemcpy(e.data(), de.ptr, 4 * n, cudaMemcpyDeviceToHost));
        double en = 0, gn = 0;
        for (size_t i = 0; i < n; ++i) en += double(e[i]) * e[i], gn += double(g[i]) * g[i];
        r.rel_error = std::sqrt(en / gn) / (repeats + 1);
      } else {
        r.rel_error = rel_error(y, g);
      }
      r.encode_gbps = 4.0 * double(n) / enc_s / 1e9;
      r.decode_gbps = 4.0 * double(n) / dec_s / 1e9;
      r.encode_vs_memcpy = enc_s / copy_s;
      r.decode_vs_memcpy = dec_s / copy_s;
      // bytes moved per element: read g (+ read and write e), write the body
      const double moved = double(n) * ((ef ? 12.0 : 4.0) + c.bits / 8.0);
      r.encode_bandwidth_vs_copy = (moved / enc_s) / (8.0 * double(n) / copy_s);
      report.results.push_back(r);
    }
  }
  report.ran = true;
  report.note.clear();
  return report;
}

}  // namespace geotrain::bench
