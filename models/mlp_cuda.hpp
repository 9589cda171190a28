// MlpCuda: the Mlp's forward and backward on one GPU, with cuBLAS and kernels/model_cuda.cuh; a
// DeviceModel (models/device_model.hpp), fp32 only.
//
// Owns: a cuBLAS handle, a CUDA stream, the batch's device copy and scratch space for
// activations (grown to the largest batch seen). Same layout and contracts as models/mlp.hpp
// (Mlp::layers() gives the offsets): parameters and gradients are device pointers into a flat
// buffer the caller owns; forward_backward accumulates (+=) into the gradient. The calls wait for
// the stream (the per-row losses are read back to sum them). Not thread-safe; one per thread
// and device.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <vector>

#include "core/device_buffer.hpp"
#include "models/device_model.hpp"
#include "models/mlp.hpp"

namespace geotrain::models {

class MlpCuda final : public DeviceModel {
 public:
  explicit MlpCuda(MlpConfig config);
  ~MlpCuda() override;
  MlpCuda(const MlpCuda&) = delete;
  MlpCuda& operator=(const MlpCuda&) = delete;

  const Mlp& layout() const override { return layout_; }
  cudaStream_t stream() const override { return stream_; }
  uint64_t parameter_count() const override { return layout_.parameter_count(); }

  // batch.x: host (B, inputs); batch.labels: host (B), each in [0, classes) (InputError naming
  // the row otherwise). d_params, d_grad: (parameter_count).
  void forward_backward(const float* d_params, const BatchView& batch, float* d_grad,
                        const Model::TensorReady& on_ready = {}) override;
  void forward(const float* d_params, const BatchView& batch) override;
  BatchResult take_result() override;

 private:
  // Copies the batch to d_x_, d_y_ on the stream after checking the labels.
  void upload(const BatchView& batch);
  BatchResult run_forward(const float* d_params, size_t batch, bool want_grad);

  Mlp layout_;  // shapes and offsets only; its CPU scratch is never used here
  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer<float> d_x_;                // (B, inputs)
  DeviceBuffer<int32_t> d_y_;              // (B)
  std::vector<DeviceBuffer<float>> acts_;  // acts_[l]: (B, out_l)
  DeviceBuffer<float> dlogits_;            // (B, classes)
  DeviceBuffer<float> dact_a_, dact_b_;    // (B, widest input), ping-pong
  DeviceBuffer<float> losses_;             // (B)
  DeviceBuffer<int32_t> correct_;          // (B)
  BatchResult result_;                     // accumulated until take_result()
};

}  // namespace geotrain::models
