// Models on the GPU against the CPU reference. Tolerance: relative 1e-4 on the loss and on every
// gradient element (scaled by max(1e-3, |cpu|)); both paths are fp32 with different summation
// orders (cuBLAS vs OpenBLAS tiling), default cuBLAS math mode (no TF32).
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/device_buffer.hpp"
#include "core/error.hpp"
#include "kernels/model_cuda.cuh"
#include "models/device_model.hpp"
#include "models/mlp.hpp"
#include "models/mlp_cuda.hpp"
#include "models/model_spec.hpp"

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

  DeviceBuffer<float> d_params(params.size()), d_grad(params.size());
  d_params.upload(params);
  std::vector<float> grad_gpu(params.size(), 0.0f);
  d_grad.upload(grad_gpu);
  // Through the DeviceModel interface, as the device-resident trainer drives it.
  DeviceModel& model = gpu;
  const BatchView view{batch, x.data(), y.data(), nullptr};
  model.forward_backward(d_params.get(), view, d_grad.get());
  const BatchResult rg = model.take_result();
  d_grad.download(grad_gpu);

  CHECK(rg.loss_sum == doctest::Approx(rc.loss_sum).epsilon(1e-4));
  CHECK(rg.correct == rc.correct);
  double worst = 0;
  for (size_t i = 0; i < params.size(); ++i)
    worst = std::max(worst, std::abs(grad_gpu[i] - grad_cpu[i]) /
                                std::max(1e-3, std::abs(static_cast<double>(grad_cpu[i]))));
  CHECK(worst < 1e-4);
  model.forward(d_params.get(), view);
  const BatchResult eg = model.take_result();
  CHECK(eg.loss_sum == doctest::Approx(rc.loss_sum).epsilon(1e-4));
  CHECK(eg.predictions == batch);
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

TEST_CASE("make_device_model: the MLP is fp32 only and refuses a label out of range by its row") {
  ModelSpec spec;
  spec.kind = "mlp";
  spec.arch = "784-64-10";
  CHECK_THROWS_WITH_AS(make_device_model(spec, Precision::kBf16),
                       doctest::Contains("bf16 trains model.kind gpt only"), InputError);
  const auto model = make_device_model(spec, Precision::kFp32);
  CHECK_FALSE(model->reports_ready_tensors());
  CHECK(model->weight_copy() == nullptr);
  CHECK(model->parameter_count() == 784 * 64 + 64 + 64 * 10 + 10);
  const std::vector<float> x(2 * 784, 0.5f);
  const std::vector<int32_t> y{3, 10};
  DeviceBuffer<float> d_params(model->parameter_count());
  CHECK_THROWS_WITH_AS(model->forward(d_params.get(), BatchView{2, x.data(), y.data(), nullptr}),
                       doctest::Contains("label 10 at row 1"), InputError);
  spec.kind = "softmax";
  CHECK_THROWS_WITH_AS(make_device_model(spec, Precision::kFp32),
                       doctest::Contains("model.kind 'softmax' has no device model"), InputError);
}
