// MlpCuda: the Mlp's forward and backward on one GPU, with cuBLAS and kernels/model_cuda.cuh.
//
// Owns: a cuBLAS handle, a CUDA stream and device scratch space for activations (grown to the
// largest batch seen). Same layout and contracts as models/mlp.hpp (Mlp::layers() gives the
// offsets): parameters and gradients are device pointers into a flat buffer the caller owns;
// forward_backward accumulates (+=) into the gradient. Calls block until the stream is done
// (they return the loss, read back from the device). Not thread-safe; one per thread and device.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <vector>

#include "models/device_buffer.hpp"
#include "models/mlp.hpp"

namespace geotrain::models {

class MlpCuda {
 public:
  explicit MlpCuda(MlpConfig config);
  ~MlpCuda();
  MlpCuda(const MlpCuda&) = delete;
  MlpCuda& operator=(const MlpCuda&) = delete;

  const Mlp& layout() const { return layout_; }
  cudaStream_t stream() const { return stream_; }

  // d_params, d_grad: (parameter_count); d_x: (B, inputs); d_labels: (B). Labels must be in
  // range (the CPU path checks them; here they are not read back).
  BatchResult forward_backward(const float* d_params, const float* d_x, const int32_t* d_labels,
                               size_t batch, float* d_grad);
  BatchResult evaluate(const float* d_params, const float* d_x, const int32_t* d_labels,
                       size_t batch);

 private:
  BatchResult forward(const float* d_params, const float* d_x, const int32_t* d_labels,
                      size_t batch, bool want_grad);

  Mlp layout_;  // shapes and offsets only; its CPU scratch is never used here
  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::vector<DeviceBuffer<float>> acts_;  // acts_[l]: (B, out_l)
  DeviceBuffer<float> dlogits_;            // (B, classes)
  DeviceBuffer<float> dact_a_, dact_b_;    // (B, widest input), ping-pong
  DeviceBuffer<float> losses_;             // (B)
  DeviceBuffer<int32_t> correct_;          // (B)
};

}  // namespace geotrain::models
