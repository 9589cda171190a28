// The GPT on the GPU against the CPU reference (kernels/ops, models/gpt), op by op and whole.
//
// Tolerances, stated per check as the worst |gpu - cpu| over max |cpu| of the tensor ("relative
// to the tensor's scale", so that elements near zero do not dominate):
//   fp32: 1e-4 for ops and the whole model's gradients, 1e-5 relative on the loss. Both sides
//         are fp32; they differ in summation order (cuBLAS vs OpenBLAS tiling, atomics).
//   bf16: 2e-2 for ops (an 8-bit mantissa: 4e-3 per rounding, a few roundings deep), 1e-2
//         relative on the loss, and per tensor a cosine similarity >= 0.99 between the bf16 and
//         the CPU gradients (a whole backward pass deep).
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/device_buffer.hpp"
#include "kernels/gpt_cuda.cuh"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/cross_entropy.hpp"
#include "kernels/ops/embedding.hpp"
#include "kernels/ops/gelu.hpp"
#include "kernels/ops/layernorm.hpp"
#include "models/gpt.hpp"
#include "models/gpt_cuda.hpp"

using namespace geotrain;
using namespace geotrain::models;
namespace kg = geotrain::kernels::cuda;
namespace kc = geotrain::kernels::cpu;
using bf16 = __nv_bfloat16;

namespace {

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// A device copy of host fp32 values as T (bf16 rounds to nearest, as the kernels do).
template <typename T>
DeviceBuffer<T> to_device(const std::vector<float>& host) {
  DeviceBuffer<T> d(host.size());
  if constexpr (std::is_same_v<T, float>) {
    d.upload(host);
  } else {
    std::vector<bf16> h(host.size());
    for (size_t i = 0; i < host.size(); ++i) h[i] = __float2bfloat16_rn(host[i]);
    d.upload(h);
  }
  return d;
}

template <typename T>
std::vector<float> to_host(const DeviceBuffer<T>& d, size_t n) {
  GT_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out(n);
  if constexpr (std::is_same_v<T, float>) {
    d.download(out);
  } else {
    std::vector<bf16> h(n);
    d.download(h);
    for (size_t i = 0; i < n; ++i) out[i] = __bfloat162float(h[i]);
  }
  return out;
}

// bf16's rounding applied on the host, so that the CPU reference sees the inputs the GPU sees.
std::vector<float> rounded(const std::vector<float>& v, bool to_bf16) {
  if (!to_bf16) return v;
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = __bfloat162float(__float2bfloat16_rn(v[i]));
  return r;
}

double scaled_error(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double worst = 0, scale = 1e-12;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::abs(double(want[i])));
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  }
  return worst / scale;
}

template <typename T>
constexpr double op_tolerance() {
  return std::is_same_v<T, float> ? 1e-4 : 2e-2;
}

constexpr size_t B = 2, T = 33, C = 64, NH = 4, V = 100;

}  // namespace

TEST_CASE_TEMPLATE("embedding forward and backward on the GPU match the CPU", X, float, bf16) {
  const bool low = std::is_same_v<X, bf16>;
  const auto wte = rounded(randn(V * C, 1), low), wpe = rounded(randn(T * C, 2), low);
  std::vector<int32_t> tokens(B * T);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 37 + 5) % V);
  std::vector<float> out(B * T * C);
  kc::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  auto dwte_t = to_device<X>(wte), dwpe_t = to_device<X>(wpe);
  DeviceBuffer<int32_t> dtok(tokens.size());
  dtok.upload(tokens);
  DeviceBuffer<X> dout(B * T * C);
  kg::embedding_forward(dout.get(), dtok.get(), dwte_t.get(), dwpe_t.get(), B, T, C, nullptr);
  CHECK(scaled_error(to_host(dout, out.size()), out) < op_tolerance<X>());

  const auto g = rounded(randn(B * T * C, 3), low);
  std::vector<float> gwte(V * C, 0.5f), gwpe(T * C, 0.25f);
  auto ggpu_wte = to_device<float>(gwte), ggpu_wpe = to_device<float>(gwpe);
  kc::embedding_backward(gwte.data(), gwpe.data(), g.data(), tokens.data(), B, T, C);
  auto dg = to_device<X>(g);
  kg::embedding_backward(ggpu_wte.get(), ggpu_wpe.get(), dg.get(), dtok.get(), B, T, C, nullptr);
  CHECK(scaled_error(to_host(ggpu_wte, gwte.size()), gwte) < 1e-5);
  CHECK(scaled_error(to_host(ggpu_wpe, gwpe.size()), gwpe) < 1e-5);
}

TEST_CASE_TEMPLATE("layernorm forward and backward on the GPU match the CPU", X, float, bf16) {
  const bool low = std::is_same_v<X, bf16>;
  const size_t N = B * T;
  const auto x = rounded(randn(N * C, 4, 2.0f), low), w = rounded(randn(C, 5), low),
             b = rounded(randn(C, 6), low), dy = rounded(randn(N * C, 7), low);
  std::vector<float> out(N * C), mean(N), rstd(N), dx = rounded(randn(N * C, 8), low), dw(C, 0.1f),
                                                   db(C, -0.1f);
  auto gx = to_device<X>(x), gw = to_device<X>(w), gb = to_device<X>(b), gdy = to_device<X>(dy);
  auto gdx = to_device<X>(dx);
  auto gdw = to_device<float>(dw), gdb = to_device<float>(db);
  DeviceBuffer<X> gout(N * C);
  DeviceBuffer<float> gmean(N), grstd(N);
  kc::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  kc::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                         mean.data(), rstd.data(), N, C);
  kg::layernorm_forward(gout.get(), gmean.get(), grstd.get(), gx.get(), gw.get(), gb.get(), N, C,
                        nullptr);
  kg::layernorm_backward(gdx.get(), gdw.get(), gdb.get(), gdy.get(), gx.get(), gw.get(),
                         gmean.get(), grstd.get(), N, C, nullptr);
  CHECK(scaled_error(to_host(gout, N * C), out) < op_tolerance<X>());
  CHECK(scaled_error(to_host(gmean, N), mean) < 1e-5);
  CHECK(scaled_error(to_host(grstd, N), rstd) < 1e-5);
  CHECK(scaled_error(to_host(gdx, N * C), dx) < op_tolerance<X>());
  CHECK(scaled_error(to_host(gdw, C), dw) < 1e-4);
  CHECK(scaled_error(to_host(gdb, C), db) < 1e-4);
}

TEST_CASE_TEMPLATE("gelu and the residual add on the GPU match the CPU", X, float, bf16) {
  const bool low = std::is_same_v<X, bf16>;
  const size_t n = 4099;
  const auto x = rounded(randn(n, 9, 3.0f), low), dy = rounded(randn(n, 10), low);
  std::vector<float> y(n), dx(n), sum(n);
  kc::gelu_forward(y.data(), x.data(), n);
  kc::gelu_backward(dx.data(), x.data(), dy.data(), n);
  for (size_t i = 0; i < n; ++i) sum[i] = x[i] + dy[i];
  auto gx = to_device<X>(x), gdy = to_device<X>(dy);
  DeviceBuffer<X> gy(n), gdx(n), gsum(n);
  kg::gelu_forward(gy.get(), gx.get(), n, nullptr);
  kg::gelu_backward(gdx.get(), gx.get(), gdy.get(), n, nullptr);
  kg::residual_forward(gsum.get(), gx.get(), gdy.get(), n, nullptr);
  CHECK(scaled_error(to_host(gy, n), y) < op_tolerance<X>());
  CHECK(scaled_error(to_host(gdx, n), dx) < op_tolerance<X>());
  CHECK(scaled_error(to_host(gsum, n), sum) < op_tolerance<X>());
}

TEST_CASE_TEMPLATE(
    "the bias gradient on the GPU is the column sum, vectorised or not, the same "
    "on every run",
    X, float, bf16) {
  // N not a multiple of the 64-row chunk; OC a multiple of 8 (16-byte loads), odd (scalar), and
  // wider than one 256-column block.
  for (const size_t OC : {size_t{8}, size_t{200}, size_t{203}, size_t{768}}) {
    const size_t N = 1000;
    const auto dout = rounded(randn(N * OC, 21 + OC), std::is_same_v<X, bf16>);
    std::vector<float> want(OC, 0.5f);  // dbias accumulates onto what it holds
    for (size_t c = 0; c < OC; ++c) {
      double sum = 0;
      for (size_t r = 0; r < N; ++r) sum += dout[r * OC + c];
      want[c] += float(sum);
    }
    auto gdout = to_device<X>(dout);
    DeviceBuffer<float> scratch(kg::bias_backward_scratch(N, OC));
    std::vector<float> first;
    for (int run = 0; run < 2; ++run) {
      auto gdbias = to_device<float>(std::vector<float>(OC, 0.5f));
      kg::bias_backward(gdbias.get(), gdout.get(), N, OC, scratch.get(), nullptr);
      const auto got = to_host(gdbias, OC);
      INFO("OC ", OC);
      CHECK(scaled_error(got, want) < 1e-5);
      if (run == 0)
        first = got;
      else
        CHECK(got == first);
    }
  }
}

TEST_CASE_TEMPLATE("softmax cross-entropy on the GPU matches the CPU, padding columns zeroed", X,
                   float, bf16) {
  const bool low = std::is_same_v<X, bf16>;
  const size_t N = 37, ld = 128;
  const auto logits = rounded(randn(N * V, 11, 3.0f), low);
  std::vector<int32_t> targets(N);
  for (size_t i = 0; i < N; ++i) targets[i] = int32_t((i * 13) % V);
  std::vector<float> losses(N), dlogits(N * V);
  const auto r = kc::cross_entropy(losses.data(), dlogits.data(), logits.data(), targets.data(), N,
                                   V, 1.0f / N);
  std::vector<float> padded(N * ld, 7.0f);
  for (size_t i = 0; i < N; ++i)
    for (size_t v = 0; v < V; ++v) padded[i * ld + v] = logits[i * V + v];
  auto glogits = to_device<X>(padded);
  DeviceBuffer<int32_t> gtargets(N), gcorrect(N);
  gtargets.upload(targets);
  DeviceBuffer<float> glosses(N);
  kg::cross_entropy(glosses.get(), gcorrect.get(), glogits.get(), glogits.get(), gtargets.get(), N,
                    V, ld, 1.0f / N, nullptr);
  CHECK(scaled_error(to_host(glosses, N), losses) < 1e-4);
  const auto gd = to_host(glogits, N * ld);
  std::vector<float> got(N * V);
  for (size_t i = 0; i < N; ++i)
    for (size_t v = 0; v < V; ++v) got[i * V + v] = gd[i * ld + v];
  CHECK(scaled_error(got, dlogits) < op_tolerance<X>());
  for (size_t i = 0; i < N; ++i)  // padding zeroed: the head's backward GEMM reads it
    for (size_t v = V; v < ld; ++v) REQUIRE(gd[i * ld + v] == 0.0f);
  std::vector<int32_t> correct(N);
  gcorrect.download(correct);
  size_t c = 0;
  for (int32_t v : correct) c += size_t(v);
  CHECK(c == r.correct);
  DeviceBuffer<double> sums(2);
  GT_CUDA_CHECK(cudaMemset(sums.get(), 0, 2 * sizeof(double)));
  kg::sum_loss(sums.get(), glosses.get(), gcorrect.get(), N, nullptr);
  std::vector<double> s(2);
  sums.download(s);
  CHECK(s[0] == doctest::Approx(r.loss_sum).epsilon(1e-5));
  CHECK(s[1] == double(r.correct));
}

namespace {

// The whole model: loss and every tensor's gradient against the CPU Gpt, on one batch.
void compare_model(const GptConfig& config, Precision precision, size_t batch) {
  Gpt cpu(config);
  std::vector<float> params(cpu.parameter_count());
  cpu.init(params, 7);
  std::vector<int32_t> tokens(batch * (config.seq_len + 1));
  std::mt19937_64 rng(3);
  for (int32_t& t : tokens) t = int32_t(rng() % config.vocab);
  const BatchView view{batch, nullptr, nullptr, tokens.data()};
  std::vector<float> grad_cpu(params.size(), 0.0f);
  const BatchResult rc = cpu.forward_backward(params, view, grad_cpu);

  GptCuda gpu(config, precision);
  DeviceBuffer<float> d_params(params.size()), d_grad(params.size());
  d_params.upload(params);
  GT_CUDA_CHECK(cudaMemset(d_grad.get(), 0, params.size() * sizeof(float)));
  gpu.refresh_weights(d_params.get());
  gpu.forward_backward(d_params.get(), view, d_grad.get());
  const BatchResult rg = gpu.take_result();
  std::vector<float> grad_gpu(params.size());
  d_grad.download(grad_gpu);
  CHECK(rg.predictions == rc.predictions);
  const bool low = precision == Precision::kBf16;
  CHECK(rg.loss_sum == doctest::Approx(rc.loss_sum).epsilon(low ? 1e-2 : 1e-5));

  size_t offset = 0;
  for (const TensorSpec& spec : cpu.tensor_specs()) {
    const std::vector<float> want(grad_cpu.begin() + long(offset),
                                  grad_cpu.begin() + long(offset + spec.size));
    const std::vector<float> got(grad_gpu.begin() + long(offset),
                                 grad_gpu.begin() + long(offset + spec.size));
    offset += spec.size;
    if (!low) {
      INFO("tensor ", spec.name);
      CHECK(scaled_error(got, want) < 1e-4);
    } else {
      double dot = 0, a = 0, b = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        dot += double(got[i]) * want[i];
        a += double(got[i]) * got[i];
        b += double(want[i]) * want[i];
      }
      INFO("tensor ", spec.name);
      CHECK(dot / std::sqrt(a * b + 1e-30) >= 0.99);
    }
  }
  // Evaluation: the forward pass alone gives the same loss.
  gpu.forward(d_params.get(), view);
  CHECK(gpu.take_result().loss_sum == doctest::Approx(rg.loss_sum).epsilon(1e-6));
}

}  // namespace

TEST_CASE("the GPT's loss and gradients on the GPU match the CPU in fp32 (1e-4 of each tensor)") {
  compare_model(GptConfig{V, C, 2, NH, T, 4}, Precision::kFp32, B);
  compare_model(gpt_preset("gpt-tiny"), Precision::kFp32, 3);
}

TEST_CASE("the GPT in bf16 on the GPU follows the CPU (loss 1e-2, gradient cosine 0.99)") {
  compare_model(GptConfig{V, C, 2, NH, T, 4}, Precision::kBf16, B);
  compare_model(gpt_preset("gpt-tiny"), Precision::kBf16, 3);
}

TEST_CASE("a token out of range is refused on the GPU path with its row and position") {
  GptCuda gpu(GptConfig{V, C, 1, NH, T, 4}, Precision::kFp32);
  DeviceBuffer<float> d_params(gpu.parameter_count()), d_grad(gpu.parameter_count());
  std::vector<int32_t> tokens(T + 1, 1);
  tokens[5] = int32_t(V);
  CHECK_THROWS_WITH_AS(gpu.forward(d_params.get(), BatchView{1, nullptr, nullptr, tokens.data()}),
                       doctest::Contains("row 0, position 5"), InputError);
}
