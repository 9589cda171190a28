// Models on the GPU against the CPU reference. Tolerance: relative 1e-4 on the loss and on every
// gradient element (scaled by max(1e-3, |cpu|)); both paths are fp32 with different summation
// orders (cuBLAS vs OpenBLAS tiling), default cuBLAS math mode (no TF32).
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/model_cuda.cuh"
#include "models/device_buffer.hpp"
#include "models/mlp.hpp"
#include "models/mlp_cuda.hpp"

using namespace geotrain;
using namespace geotrain::models;

namespace {

void compare(const MlpConfig& config, size_t batch, uint64_t seed) {
  Mlp cpu(config);
  MlpCuda gpu(config);
  std::vector<float> params(cpu.parameter_count());
  cpu.init(params, seed);
  std::mt19937_64 rng(seed + 1);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> x(batch * config.inputs);
  for (float& v : x) v = u(rng);
  std::vector<int32_t> y(batch);
  for (size_t i = 0; i < batch; ++i) y[i] = static_cast<int32_t>((i * 7) % config.classes);

  std::vector<float> grad_cpu(params.size(), 0.0f);
  const BatchResult rc = cpu.forward_backward(params, x.data(), y.data(), batch, grad_cpu);

  DeviceBuffer<float> d_params(params.size()), d_grad(params.size()), d_x(x.size());
  DeviceBuffer<int32_t> d_y(batch);
  d_params.upload(params);
  d_x.upload(x);
  d_y.upload(y);
  std::vector<float> grad_gpu(params.size(), 0.0f);
  d_grad.upload(grad_gpu);
  const BatchResult rg =
      gpu.forward_backward(d_params.get(), d_x.get(), d_y.get(), batch, d_grad.get());
  d_grad.download(grad_gpu);

  CHECK(rg.loss_sum == doctest::Approx(rc.loss_sum).epsilon(1e-4));
  CHECK(rg.correct == rc.correct);
  double worst = 0;
  for (size_t i = 0; i < params.size(); ++i)
    worst = std::max(worst, std::abs(grad_gpu[i] - grad_cpu[i]) /
                                std::max(1e-3, std::abs(static_cast<double>(grad_cpu[i]))));
  CHECK(worst < 1e-4);
  const BatchResult eg = gpu.evaluate(d_params.get(), d_x.get(), d_y.get(), batch);
  CHECK(eg.loss_sum == doctest::Approx(rc.loss_sum).epsilon(1e-4));
}

}  // namespace

TEST_CASE("the default MLP's loss and gradients on the GPU match the CPU within 1e-4") {
  compare(MlpConfig{}, 64, 1);
  compare(MlpConfig{}, 3, 2);  // a batch smaller than a warp's rows
}

TEST_CASE("softmax regression and an odd-sized MLP on the GPU match the CPU within 1e-4") {
  compare(softmax_regression_config(), 50, 3);
  compare(MlpConfig{37, {33, 65}, 40}, 17, 4);  // more classes than a warp's lanes
}
