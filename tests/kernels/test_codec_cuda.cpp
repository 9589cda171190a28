// CPU vs CUDA: the packed bodies and the residuals are identical, byte for byte.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "core/check_cuda.hpp"
#include "kernels/codec_cpu.hpp"
#include "kernels/codec_cuda.cuh"
#include "../compression/test_util.hpp"

using namespace geotrain;
using namespace geotrain::kernels;

namespace {

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) { GT_CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(n, 1) * sizeof(T))); }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    GT_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(ptr_); }
  T* get() { return ptr_; }
  std::vector<T> to_host() const {
    std::vector<T> h(n_);
    GT_CUDA_CHECK(cudaMemcpy(h.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const size_t kSizes[] = {1, 31, 1000, 4096, 100'003};

}  // namespace

TEST_CASE("onebit: CUDA encode and decode match the CPU bit for bit, with and without EF") {
  for (uint32_t chunk : {32u, 256u, 512u, 1024u, 2048u}) {
    for (size_t n : kSizes) {
      for (bool ef : {false, true}) {
        CAPTURE(chunk); CAPTURE(n); CAPTURE(ef);
        auto g = test::heavy_tailed(n, unsigned(n + chunk));
        auto e = test::gaussian(n, 5, 0.1f);
        const size_t nc = chunk_count(n, chunk), nw = onebit_word_count(n);
        std::vector<float> scales(nc), e_cpu = e;
        std::vector<uint32_t> bits(nw);
        cpu::onebit_encode(g.data(), ef ? e_cpu.data() : nullptr, n, chunk, scales.data(), bits.data());
        DeviceArray<float> dg(g), de(e), dscales(nc);
        DeviceArray<uint32_t> dbits(nw);
        cuda::onebit_encode(dg.get(), ef ? de.get() : nullptr, n, chunk, dscales.get(), dbits.get(), 0);
        CHECK(same_bits(dscales.to_host(), scales));
        CHECK(dbits.to_host() == bits);
        if (ef) CHECK(same_bits(de.to_host(), e_cpu));
        std::vector<float> y_cpu(n, 1.0f);
        cpu::onebit_decode(scales.data(), bits.data(), n, chunk, y_cpu.data(), true);
        DeviceArray<float> dy(std::vector<float>(n, 1.0f));
        cuda::onebit_decode(dscales.get(), dbits.get(), n, chunk, dy.get(), true, 0);
        CHECK(same_bits(dy.to_host(), y_cpu));
      }
    }
  }
}

TEST_CASE("int8 and int4: CUDA matches the CPU bit for bit, nearest and stochastic rounding") {
  for (bool stochastic : {false, true}) {
    for (size_t n : kSizes) {
      for (bool ef : {false, true}) {
        CAPTURE(stochastic); CAPTURE(n); CAPTURE(ef);
        const uint32_t chunk = 256;
        const Rounding r{stochastic, 17, 3};
        auto g = test::heavy_tailed(n, unsigned(n));
        auto e = test::gaussian(n, 6, 0.1f);
        const size_t nc = chunk_count(n, chunk);
        // int8
        std::vector<float> s8(nc), e8 = e;
        std::vector<int8_t> q8(n);
        cpu::int8_encode(g.data(), ef ? e8.data() : nullptr, n, chunk, r, s8.data(), q8.data());
        DeviceArray<float> dg(g), de(e), ds(nc);
        DeviceArray<int8_t> dq(n);
        cuda::int8_encode(dg.get(), ef ? de.get() : nullptr, n, chunk, r, ds.get(), dq.get(), 0);
        CHECK(same_bits(ds.to_host(), s8));
        CHECK(dq.to_host() == q8);
        if (ef) CHECK(same_bits(de.to_host(), e8));
        std::vector<float> y(n);
        cpu::int8_decode(s8.data(), q8.data(), n, chunk, y.data(), false);
        DeviceArray<float> dy(n);
        cuda::int8_decode(ds.get(), dq.get(), n, chunk, dy.get(), false, 0);
        CHECK(same_bits(dy.to_host(), y));
        // int4
        std::vector<float> s4(nc), e4 = e;
        std::vector<uint8_t> p4(int4_byte_count(n));
        cpu::int4_encode(g.data(), ef ? e4.data() : nullptr, n, chunk, r, s4.data(), p4.data());
        DeviceArray<float> de4(e), ds4(nc);
        DeviceArray<uint8_t> dp4(p4.size());
        cuda::int4_encode(dg.get(), ef ? de4.get() : nullptr, n, chunk, r, ds4.get(), dp4.get(), 0);
        CHECK(same_bits(ds4.to_host(), s4));
        CHECK(dp4.to_host() == p4);
        if (ef) CHECK(same_bits(de4.to_host(), e4));
        cpu::int4_decode(s4.data(), p4.data(), n, chunk, y.data(), false);
        cuda::int4_decode(ds4.get(), dp4.get(), n, chunk, dy.get(), false, 0);
        CHECK(same_bits(dy.to_host(), y));
      }
    }
  }
}

TEST_CASE("fp32, fp16 and bf16: CUDA matches the CPU bit for bit") {
  for (size_t n : kSizes) {
    for (bool ef : {false, true}) {
      CAPTURE(n); CAPTURE(ef);
      auto g = test::heavy_tailed(n, unsigned(n) + 1);
      auto e = test::gaussian(n, 7, 0.1f);
      DeviceArray<float> dg(g);
      for (bool bf : {false, true}) {
        std::vector<float> ec = e;
        std::vector<uint16_t> h(n);
        (bf ? cpu::bf16_encode : cpu::fp16_encode)(g.data(), ef ? ec.data() : nullptr, n, h.data());
        DeviceArray<float> de(e);
        DeviceArray<uint16_t> dh(n);
        (bf ? cuda::bf16_encode : cuda::fp16_encode)(dg.get(), ef ? de.get() : nullptr, n, dh.get(), 0);
        CHECK(dh.to_host() == h);
        if (ef) CHECK(same_bits(de.to_host(), ec));
        std::vector<float> y(n);
        (bf ? cpu::bf16_decode : cpu::fp16_decode)(h.data(), n, y.data(), false);
        DeviceArray<float> dy(n);
        (bf ? cuda::bf16_decode : cuda::fp16_decode)(dh.get(), n, dy.get(), false, 0);
        CHECK(same_bits(dy.to_host(), y));
      }
      std::vector<float> ec = e, out(n);
      cpu::fp32_encode(g.data(), ef ? ec.data() : nullptr, n, out.data());
      DeviceArray<float> de(e), dout(n);
      cuda::fp32_encode(dg.get(), ef ? de.get() : nullptr, n, dout.get(), 0);
      CHECK(same_bits(dout.to_host(), out));
      if (ef) CHECK(same_bits(de.to_host(), ec));
    }
  }
}
