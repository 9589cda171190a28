// DeviceFeedback and DeviceDecoder against the CPU's ErrorFeedback and decoders: the same payload
// bytes, residual bits and decoded values, codec by codec (a GPU suite: SKIPPED without one).
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "compression/codec.hpp"
#include "compression/device_feedback.hpp"
#include "compression/error_feedback.hpp"
#include "compression/factory.hpp"
#include "core/device_buffer.hpp"
#include "core/error.hpp"
#include "kernels/codec_cuda.cuh"
#include "test_util.hpp"

using namespace geotrain;
using namespace geotrain::compression;

namespace {

// Every codec family, chunk sizes the CUDA kernels special-case and not, stochastic rounding,
// and a zstd stage after a dense and a sparse codec.
const char* const kSpecs[] = {"fp32",
                              "fp16",
                              "bf16",
                              "int8",
                              "int8:chunk=256,stochastic,seed=3",
                              "int4:stochastic",
                              "fp4:chunk=32",
                              "onebit",
                              "onebit:scale=rms",
                              "onebit:chunk=96",
                              "topk:ratio=0.01",
                              "topk:ratio=0.02,bits=2",
                              "topk:ratio=0.05,bits=4,chunk=256",
                              "onebit+zstd",
                              "topk:ratio=0.01+zstd:level=1"};

// Two streams of lengths that end in a partial chunk, as a leader's segments do.
const std::pair<uint64_t, size_t> kStreams[] = {{3, 1'037}, {11, 100'003}};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

DeviceBuffer<float> on_device(const std::vector<float>& host) {
  DeviceBuffer<float> d(host.size());
  d.upload(host);
  return d;
}

std::vector<float> to_host(const DeviceBuffer<float>& d) {
  std::vector<float> host(d.size());
  d.download(host);
  return host;
}

// `rounds` rounds of every stream through both, checking bytes and residuals after each.
void expect_same_rounds(ErrorFeedback& cpu, DeviceFeedback& gpu, int rounds, unsigned seed) {
  for (int r = 0; r < rounds; ++r) {
    for (const auto& [stream, n] : kStreams) {
      CAPTURE(r);
      CAPTURE(stream);
      const auto g = test::heavy_tailed(n, static_cast<unsigned>(seed + 100 * r + stream));
      Bytes want, got;
      cpu.encode(stream, g, want);
      const auto dg = on_device(g);
      gpu.encode(stream, dg.get(), n, got);
      REQUIRE(got.size() == want.size());
      CHECK(std::memcmp(got.data(), want.data(), want.size()) == 0);
      const auto e = cpu.residual(stream);
      CHECK(same_bits(gpu.residual(stream), std::vector<float>(e.begin(), e.end())));
    }
  }
}

}  // namespace

TEST_CASE("DeviceFeedback: the CPU's payload bytes and residuals, every codec, decay 1 and 0.6") {
  for (const char* spec : kSpecs) {
    for (float decay : {1.0f, 0.6f}) {
      CAPTURE(spec);
      CAPTURE(decay);
      ErrorFeedback cpu(make_codec(spec), FeedbackOptions{decay});
      DeviceFeedback gpu(spec, FeedbackOptions{decay});
      expect_same_rounds(cpu, gpu, 3, 7);
      CHECK(gpu.streams() == cpu.streams());
    }
  }
}

TEST_CASE("DeviceFeedback: a codec switch keeps the residuals, as ErrorFeedback's does") {
  ErrorFeedback cpu(make_codec("onebit:scale=rms"), FeedbackOptions{0.6f});
  DeviceFeedback gpu("onebit:scale=rms", FeedbackOptions{0.6f});
  expect_same_rounds(cpu, gpu, 2, 21);
  cpu.set_codec(make_codec("int8:stochastic,seed=5"));
  gpu.set_codec("int8:stochastic,seed=5");
  CHECK(gpu.spec() == "int8:stochastic,seed=5");
  expect_same_rounds(cpu, gpu, 2, 22);
}

TEST_CASE("DeviceFeedback: residuals restored from a checkpoint, reset, and a length change") {
  const auto g = test::gaussian(5'000, 3);
  const auto restored = test::gaussian(5'000, 4, 0.1f);
  ErrorFeedback cpu(make_codec("onebit"));
  DeviceFeedback gpu("onebit");
  cpu.set_residual(9, restored);
  gpu.set_residual(9, restored);
  CHECK(same_bits(gpu.residual(9), restored));
  Bytes want, got;
  cpu.encode(9, g, want);
  const auto dg = on_device(g);
  gpu.encode(9, dg.get(), g.size(), got);
  CHECK(got == want);

  // A length change is refused, naming the stream, and the residual is kept.
  const auto before = gpu.residual(9);
  CHECK_THROWS_WITH_AS(gpu.encode(9, dg.get(), 4'000, got), doctest::Contains("stream 9"),
                       InputError);
  CHECK(same_bits(gpu.residual(9), before));

  gpu.reset(9);
  CHECK(gpu.residual(9).empty());
  CHECK(gpu.streams().empty());
  CHECK_THROWS_AS(DeviceFeedback("onebit:chunk=33"), InputError);
  CHECK_THROWS_AS(DeviceFeedback("onebit", FeedbackOptions{1.5f}), InputError);
}

TEST_CASE("DeviceDecoder: decode and decode_add give the CPU decoder's values, bit for bit") {
  for (const char* spec : kSpecs) {
    CAPTURE(spec);
    const size_t n = 100'003;
    Bytes payload;
    make_codec(spec)->encode(test::heavy_tailed(n, 31), payload);
    const auto y0 = test::gaussian(n, 32);
    DeviceDecoder decoder;
    for (bool add : {false, true}) {
      CAPTURE(add);
      std::vector<float> want = y0;
      add ? decode_add_payload(payload, want) : decode_payload(payload, want);
      auto dy = on_device(y0);
      add ? decoder.decode_add(payload, dy.get(), n) : decoder.decode(payload, dy.get(), n);
      CHECK(same_bits(to_host(dy), want));
    }
  }
}

TEST_CASE("DeviceDecoder: a corrupt or mismatched payload is an input error, y untouched") {
  const size_t n = 4'096;
  const auto y0 = test::gaussian(n, 5);
  for (const char* spec : {"onebit", "topk:ratio=0.01"}) {
    CAPTURE(spec);
    Bytes payload;
    make_codec(spec)->encode(test::gaussian(n, 6), payload);
    DeviceDecoder decoder;
    auto dy = on_device(y0);
    Bytes flipped = payload;
    flipped.back() ^= std::byte{1};
    CHECK_THROWS_WITH_AS(decoder.decode_add(flipped, dy.get(), n), doctest::Contains("checksum"),
                         InputError);
    CHECK_THROWS_WITH_AS(decoder.decode_add(payload, dy.get(), n - 1),
                         doctest::Contains("elements"), InputError);
    CHECK(same_bits(to_host(dy), y0));
  }
}

TEST_CASE("subtract: the host's local - base, bit for bit") {
  const auto a = test::heavy_tailed(70'001, 1), b = test::heavy_tailed(70'001, 2);
  auto da = on_device(a), db = on_device(b);
  DeviceBuffer<float> dd(a.size());
  kernels::cuda::subtract(da.get(), db.get(), a.size(), dd.get(), nullptr);
  GT_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> want(a.size());
  for (size_t i = 0; i < a.size(); ++i) want[i] = a[i] - b[i];
  CHECK(same_bits(to_host(dd), want));
}

TEST_CASE("DeviceFeedback refuses a codec with an RMS step, which its kernels do not have") {
  CHECK_THROWS_WITH_AS(DeviceFeedback("int4:step=2+zstd"),
                       doctest::Contains("step is not available on the device"), InputError);
}
