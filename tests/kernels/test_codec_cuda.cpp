// CPU vs CUDA: the packed bodies and the residuals are identical, byte for byte.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "../compression/test_util.hpp"
#include "compression/codecs.hpp"
#include "compression/error_feedback.hpp"
#include "compression/payload.hpp"
#include "core/check_cuda.hpp"
#include "kernels/codec_cpu.hpp"
#include "kernels/codec_cuda.cuh"
#include "kernels/qtopk_cuda.cuh"
#include "kernels/topk_cuda.cuh"

using namespace geotrain;
using namespace geotrain::kernels;

namespace {

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    GT_CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(n, 1) * sizeof(T)));
  }
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
        for (OnebitScale scale_kind : {OnebitScale::mean, OnebitScale::rms}) {
          CAPTURE(chunk);
          CAPTURE(n);
          CAPTURE(ef);
          CAPTURE(int(scale_kind));
          auto g = test::heavy_tailed(n, unsigned(n + chunk));
          auto e = test::gaussian(n, 5, 0.1f);
          const size_t nc = chunk_count(n, chunk), nw = onebit_word_count(n);
          std::vector<float> scales(nc), e_cpu = e;
          std::vector<uint32_t> bits(nw);
          cpu::onebit_encode(g.data(), ef ? e_cpu.data() : nullptr, n, chunk, scales.data(),
                             bits.data(), scale_kind);
          DeviceArray<float> dg(g), de(e), dscales(nc);
          DeviceArray<uint32_t> dbits(nw);
          cuda::onebit_encode(dg.get(), ef ? de.get() : nullptr, n, chunk, dscales.get(),
                              dbits.get(), 0, scale_kind);
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
}

TEST_CASE("EF decay: every CUDA encoder forms x = g + beta e as ErrorFeedback does on the CPU") {
  // The CPU side is ErrorFeedback's order: r = beta e in scratch, then the fused encode on r.
  const float beta = 0.6f;
  for (size_t n : {size_t{1000}, size_t{100'003}}) {
    CAPTURE(n);
    const auto g = test::heavy_tailed(n, unsigned(n) + 21);
    const auto e = test::gaussian(n, 22, 0.1f);
    std::vector<float> r(n);
    for (size_t i = 0; i < n; ++i) r[i] = beta * e[i];
    DeviceArray<float> dg(g);
    const uint32_t chunk = 1024;
    const size_t nc = chunk_count(n, chunk);
    {  // fp32
      std::vector<float> rc = r, out(n);
      cpu::fp32_encode(g.data(), rc.data(), n, out.data());
      DeviceArray<float> de(e), dout(n);
      cuda::fp32_encode(dg.get(), de.get(), n, dout.get(), 0, beta);
      CHECK(same_bits(dout.to_host(), out));
      CHECK(same_bits(de.to_host(), rc));
    }
    {  // bf16
      std::vector<float> rc = r;
      std::vector<uint16_t> h(n);
      cpu::bf16_encode(g.data(), rc.data(), n, h.data());
      DeviceArray<float> de(e);
      DeviceArray<uint16_t> dh(n);
      cuda::bf16_encode(dg.get(), de.get(), n, dh.get(), 0, beta);
      CHECK(dh.to_host() == h);
      CHECK(same_bits(de.to_host(), rc));
    }
    {  // int8, stochastic rounding
      const Rounding rounding{true, 5, 2};
      std::vector<float> rc = r, s8(nc);
      std::vector<int8_t> q(n);
      cpu::int8_encode(g.data(), rc.data(), n, chunk, rounding, s8.data(), q.data());
      DeviceArray<float> de(e), ds(nc);
      DeviceArray<int8_t> dq(n);
      cuda::int8_encode(dg.get(), de.get(), n, chunk, rounding, ds.get(), dq.get(), 0, beta);
      CHECK(same_bits(ds.to_host(), s8));
      CHECK(dq.to_host() == q);
      CHECK(same_bits(de.to_host(), rc));
    }
    {  // fp4
      std::vector<float> rc = r, s4(nc);
      std::vector<uint8_t> p(int4_byte_count(n));
      cpu::fp4_encode(g.data(), rc.data(), n, chunk, s4.data(), p.data());
      DeviceArray<float> de(e), ds(nc);
      DeviceArray<uint8_t> dp(p.size());
      cuda::fp4_encode(dg.get(), de.get(), n, chunk, ds.get(), dp.get(), 0, beta);
      CHECK(same_bits(ds.to_host(), s4));
      CHECK(dp.to_host() == p);
      CHECK(same_bits(de.to_host(), rc));
    }
    for (uint32_t ochunk : {1024u, 2048u}) {  // onebit, the register path and the general one
      for (OnebitScale kind : {OnebitScale::mean, OnebitScale::rms}) {
        CAPTURE(ochunk);
        CAPTURE(int(kind));
        const size_t onc = chunk_count(n, ochunk);
        std::vector<float> rc = r, s1(onc);
        std::vector<uint32_t> bits(onebit_word_count(n));
        cpu::onebit_encode(g.data(), rc.data(), n, ochunk, s1.data(), bits.data(), kind);
        DeviceArray<float> de(e), ds(onc);
        DeviceArray<uint32_t> dbits(bits.size());
        cuda::onebit_encode(dg.get(), de.get(), n, ochunk, ds.get(), dbits.get(), 0, kind, beta);
        CHECK(same_bits(ds.to_host(), s1));
        CHECK(dbits.to_host() == bits);
        CHECK(same_bits(de.to_host(), rc));
      }
    }
    for (uint32_t bits : {0u, 2u}) {  // topk, and SparseLoCo's 2-bit topk, through ErrorFeedback
      CAPTURE(bits);
      compression::ErrorFeedback ef(compression::make_topk_codec({0.02, 4096, bits, chunk}),
                                    compression::FeedbackOptions{beta});
      ef.set_residual(0, e);
      Bytes payload;
      ef.encode(0, g, payload);
      const std::vector<std::byte> body(payload.begin() + compression::kHeaderBytes, payload.end());
      const auto residual = ef.residual(0);
      const std::vector<float> e_cpu(residual.begin(), residual.end());
      DeviceArray<float> de(e);
      DeviceArray<std::byte> dbody(14 * n + 64);
      size_t size = 0;
      if (bits == 0) {
        size = cuda::topk_encode(dg.get(), de.get(), n, compression::topk_count(n, 0.02), 4096,
                                 dbody.get(), 0, beta);
      } else {
        const QtopkLayout layout{n, chunk, uint32_t(compression::topk_count(chunk, 0.02)), bits};
        std::byte* base = dbody.get();
        cuda::qtopk_encode(dg.get(), de.get(), layout, reinterpret_cast<float*>(base),
                           reinterpret_cast<uint8_t*>(base + layout.values_offset()),
                           reinterpret_cast<uint8_t*>(base + layout.indices_offset()), 0, beta);
        size = layout.body_bytes();
      }
      REQUIRE(size == body.size());
      auto got = dbody.to_host();
      got.resize(size);
      CHECK(got == body);
      CHECK(same_bits(de.to_host(), e_cpu));
    }
  }
}

TEST_CASE("topk: x that is not 16-byte aligned (a segment inside a buffer) selects the same") {
  const size_t n = 100'003;
  auto g = test::heavy_tailed(n + 1, 41);
  const std::vector<float> segment(g.begin() + 1, g.end());
  auto codec = compression::make_topk_codec({0.01, 4096});
  Bytes payload;
  codec->encode(segment, payload);
  const uint64_t k = compression::topk_count(n, 0.01);
  DeviceArray<float> dg(g);
  DeviceArray<std::byte> dbody(14 * k + 16);
  const size_t size = cuda::topk_encode(dg.get() + 1, nullptr, n, k, 4096, dbody.get(), 0);
  REQUIRE(size == payload.size() - compression::kHeaderBytes);
  auto got = dbody.to_host();
  CHECK(std::memcmp(got.data(), payload.data() + compression::kHeaderBytes, size) == 0);
}

TEST_CASE("topk: repeated encodes of one size reuse the device buffers and stay exact") {
  // The workspace is kept per thread: a larger, then a smaller, then the larger size again.
  for (size_t n : {size_t{200'000}, size_t{5000}, size_t{200'000}}) {
    CAPTURE(n);
    const auto g = test::heavy_tailed(n, unsigned(n) + 31);
    auto codec = compression::make_topk_codec({0.01, 4096});
    Bytes payload;
    codec->encode(g, payload);
    const uint64_t k = compression::topk_count(n, 0.01);
    DeviceArray<float> dg(g);
    DeviceArray<std::byte> dbody(14 * k + 16);
    const size_t size = cuda::topk_encode(dg.get(), nullptr, n, k, 4096, dbody.get(), 0);
    REQUIRE(size == payload.size() - compression::kHeaderBytes);
    auto got = dbody.to_host();
    got.resize(size);
    CHECK(std::memcmp(got.data(), payload.data() + compression::kHeaderBytes, size) == 0);
  }
}

TEST_CASE("int8 and int4: CUDA matches the CPU bit for bit, nearest and stochastic rounding") {
  for (bool stochastic : {false, true}) {
    for (size_t n : kSizes) {
      for (bool ef : {false, true}) {
        CAPTURE(stochastic);
        CAPTURE(n);
        CAPTURE(ef);
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
      CAPTURE(n);
      CAPTURE(ef);
      auto g = test::heavy_tailed(n, unsigned(n) + 1);
      auto e = test::gaussian(n, 7, 0.1f);
      DeviceArray<float> dg(g);
      for (bool bf : {false, true}) {
        std::vector<float> ec = e;
        std::vector<uint16_t> h(n);
        (bf ? cpu::bf16_encode : cpu::fp16_encode)(g.data(), ef ? ec.data() : nullptr, n, h.data());
        DeviceArray<float> de(e);
        DeviceArray<uint16_t> dh(n);
        (bf ? cuda::bf16_encode : cuda::fp16_encode)(dg.get(), ef ? de.get() : nullptr, n, dh.get(),
                                                     0, 1.0f);  // no default through a pointer
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

TEST_CASE("topk: the CUDA body and residual match the CPU codec's, byte for byte") {
  for (double ratio : {0.001, 0.01, 0.3, 1.0}) {
    for (size_t n : {1ul, 1000ul, 100'003ul}) {
      for (bool ef : {false, true}) {
        CAPTURE(ratio);
        CAPTURE(n);
        CAPTURE(ef);
        auto g = test::heavy_tailed(n, unsigned(n) + 3);
        for (size_t i = 0; i < n; i += 7) g[i] = 0.5f;  // plenty of ties
        auto e = test::gaussian(n, 8, 0.1f);
        auto codec = compression::make_topk_codec({ratio, 4096});
        Bytes payload;
        std::vector<float> e_cpu = e;
        if (ef)
          codec->encode_with_feedback(g, e_cpu, payload);
        else
          codec->encode(g, payload);
        const std::vector<std::byte> body(payload.begin() + compression::kHeaderBytes,
                                          payload.end());

        const uint64_t k = compression::topk_count(n, ratio);
        DeviceArray<float> dg(g), de(e);
        DeviceArray<std::byte> dbody(14 * k + 16);
        const size_t size =
            cuda::topk_encode(dg.get(), ef ? de.get() : nullptr, n, k, 4096, dbody.get(), 0);
        REQUIRE(size == body.size());
        auto got = dbody.to_host();
        got.resize(size);
        CHECK(got == body);
        if (ef) CHECK(same_bits(de.to_host(), e_cpu));
      }
    }
  }
}

TEST_CASE("topk: CUDA decode scatters the values like the CPU decoder") {
  const size_t n = 5000;
  auto x = test::heavy_tailed(n, 12);
  auto codec = compression::make_topk_codec({0.02, 4096});
  Bytes payload;
  codec->encode(x, payload);
  std::vector<float> decoded(n), expected(n, 2.0f);
  codec->decode(payload, decoded);
  codec->decode_add(payload, expected);
  // Indices and values as the host decoder would hand them over (heavy-tailed values are never 0).
  std::vector<float> values;
  std::vector<uint32_t> index;
  for (size_t i = 0; i < n; ++i) {
    if (decoded[i] != 0.0f) {
      index.push_back(uint32_t(i));
      values.push_back(decoded[i]);
    }
  }
  REQUIRE(index.size() == compression::topk_count(n, 0.02));
  DeviceArray<float> dv(values), dy(std::vector<float>(n, 2.0f));
  DeviceArray<uint32_t> di(index);
  cuda::topk_decode(dv.get(), di.get(), index.size(), n, dy.get(), true, 0);
  CHECK(same_bits(dy.to_host(), expected));
}

TEST_CASE("fp4: CUDA encode and decode match the CPU bit for bit, with and without EF") {
  for (uint32_t chunk : {32u, 256u, 1024u, 2048u}) {
    for (size_t n : kSizes) {
      for (bool ef : {false, true}) {
        CAPTURE(chunk);
        CAPTURE(n);
        CAPTURE(ef);
        auto g = test::heavy_tailed(n, unsigned(n + chunk) + 9);
        for (size_t i = 0; i < n; i += 11) g[i] = 0.0f;  // exact zeros, and ties below
        if (n > 3) g[1] = -g[0], g[2] = 0.125f * g[0];
        auto e = test::gaussian(n, 9, 0.1f);
        const size_t nc = chunk_count(n, chunk), nb = int4_byte_count(n);
        std::vector<float> scales(nc), e_cpu = e;
        std::vector<uint8_t> packed(nb);
        cpu::fp4_encode(g.data(), ef ? e_cpu.data() : nullptr, n, chunk, scales.data(),
                        packed.data());
        DeviceArray<float> dg(g), de(e), dscales(nc);
        DeviceArray<uint8_t> dpacked(nb);
        cuda::fp4_encode(dg.get(), ef ? de.get() : nullptr, n, chunk, dscales.get(), dpacked.get(),
                         0);
        CHECK(same_bits(dscales.to_host(), scales));
        CHECK(dpacked.to_host() == packed);
        if (ef) CHECK(same_bits(de.to_host(), e_cpu));
        std::vector<float> y_cpu(n, 1.0f);
        cpu::fp4_decode(scales.data(), packed.data(), n, chunk, y_cpu.data(), true);
        DeviceArray<float> dy(std::vector<float>(n, 1.0f));
        cuda::fp4_decode(dscales.get(), dpacked.get(), n, chunk, dy.get(), true, 0);
        CHECK(same_bits(dy.to_host(), y_cpu));
      }
    }
  }
}

TEST_CASE("topk with quantised values: the CUDA body and residual match the CPU codec's") {
  // Through the codec on the CPU side, so that the header, layout and bytes are the wire's.
  for (uint32_t chunk : {32u, 1024u, 4096u}) {
    for (uint32_t bits : {2u, 4u, 8u}) {
      for (double ratio : {0.001, 0.02, 0.3, 1.0}) {
        for (size_t n : {size_t{1}, size_t{1000}, size_t{100'003}}) {
          for (bool ef : {false, true}) {
            CAPTURE(chunk);
            CAPTURE(bits);
            CAPTURE(ratio);
            CAPTURE(n);
            CAPTURE(ef);
            auto g = test::heavy_tailed(n, unsigned(n) + bits);
            for (size_t i = 0; i < n; i += 7) g[i] = 0.5f;  // plenty of ties
            auto e = test::gaussian(n, 10, 0.1f);
            auto codec = compression::make_topk_codec({ratio, 4096, bits, chunk});
            Bytes payload;
            std::vector<float> e_cpu = e;
            if (ef)
              codec->encode_with_feedback(g, e_cpu, payload);
            else
              codec->encode(g, payload);
            const std::vector<std::byte> body(payload.begin() + compression::kHeaderBytes,
                                              payload.end());

            const QtopkLayout layout{n, chunk, uint32_t(compression::topk_count(chunk, ratio)),
                                     bits};
            REQUIRE(layout.body_bytes() == body.size());
            DeviceArray<float> dg(g), de(e);
            DeviceArray<std::byte> dbody(body.size());
            std::byte* base = dbody.get();
            cuda::qtopk_encode(dg.get(), ef ? de.get() : nullptr, layout,
                               reinterpret_cast<float*>(base),
                               reinterpret_cast<uint8_t*>(base + layout.values_offset()),
                               reinterpret_cast<uint8_t*>(base + layout.indices_offset()), 0);
            CHECK(dbody.to_host() == body);
            if (ef) CHECK(same_bits(de.to_host(), e_cpu));

            std::vector<float> y_cpu(n, 2.0f);
            codec->decode_add(payload, y_cpu);
            DeviceArray<float> dy(std::vector<float>(n, 2.0f));
            cuda::qtopk_decode(layout, reinterpret_cast<float*>(base),
                               reinterpret_cast<uint8_t*>(base + layout.values_offset()),
                               reinterpret_cast<uint8_t*>(base + layout.indices_offset()), dy.get(),
                               true, 0);
            CHECK(same_bits(dy.to_host(), y_cpu));
          }
        }
      }
    }
  }
}
