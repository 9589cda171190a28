// GptCuda: the Gpt (models/gpt.hpp) on one GPU, in fp32 or bf16 mixed precision.
//
// Same architecture, parameter layout and contracts as the CPU Gpt. The linear layers run through
// cuBLASLt (bias fused as its epilogue), attention through cuBLAS strided batched GEMMs around a
// fused causal softmax (kernels/gpt_cuda.cuh; not a flash kernel: the (T, T) probabilities of
// every layer are kept for backward), the rest through kernels/gpt_cuda.cuh.
//
// Precision:
//   fp32: every GEMM and activation in fp32 (CUBLAS_COMPUTE_32F, no TF32), to match the CPU.
//   bf16: activations and GEMM inputs in bf16, GEMMs accumulate in fp32; the weights the GEMMs
//         read are a bf16 copy of the fp32 master parameters (refresh_weights, or written by the
//         fused optimizer step through weight_copy()); parameter gradients stay fp32 and are
//         accumulated by the GEMMs (fp32 output, beta = 1) and the kernels. LayerNorm statistics,
//         softmax sums and losses are fp32.
//
// Owns: a cuBLAS and a cuBLASLt handle, a CUDA stream, the bf16 weight copy, and one device arena
// for activations (grown to the largest batch seen). Parameters and gradients are device pointers
// into a flat (parameter_count) fp32 buffer that the caller owns. Calls are asynchronous on
// stream() except take_result() (and the batch upload, a small synchronous copy). Not
// thread-safe: one per thread and device.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "core/device_buffer.hpp"
#include "models/device_model.hpp"
#include "models/gpt.hpp"

namespace geotrain::models {

class GptCuda final : public DeviceModel {
 public:
  GptCuda(GptConfig config, Precision precision);
  ~GptCuda();
  GptCuda(const GptCuda&) = delete;
  GptCuda& operator=(const GptCuda&) = delete;

  const Gpt& layout() const override { return layout_; }
  Precision precision() const { return precision_; }
  cudaStream_t stream() const override { return stream_; }
  uint64_t parameter_count() const override { return layout_.parameter_count(); }
  bool reports_ready_tensors() const override { return true; }

  // bf16: the copy of the weights the GEMMs read, (parameter_count); null for fp32.
  __nv_bfloat16* weight_copy() override {
    return precision_ == Precision::kBf16 ? weights_.get() : nullptr;
  }
  // bf16: rewrites weight_copy() from d_params (after the parameters changed other than through
  // a fused optimizer step that wrote the copy). fp32: nothing to do.
  void refresh_weights(const float* d_params) override;

  // batch.tokens: host (B, T + 1), every token in [0, vocab) (checked: InputError naming the row
  // and position). d_grad (parameter_count) += d(mean loss over the B T predictions)/d(params).
  // The loss and argmax counts are added to the result accumulator (take_result).
  // on_ready(tensor), when given, is called during backward as soon as the kernels that finish
  // that tensor's gradient are queued on stream() (not run: record an event to wait for them),
  // in the order Gpt::forward_backward reports them, so that a bucket's AllReduce can start.
  void forward_backward(const float* d_params, const BatchView& batch, float* d_grad,
                        const Model::TensorReady& on_ready = {}) override;
  // Forward only, adding to the same accumulator.
  void forward(const float* d_params, const BatchView& batch) override;
  // Synchronises the stream, returns the accumulated loss sum, correct and predictions, and
  // clears the accumulator.
  BatchResult take_result() override;

 private:
  struct Acts;  // pointers into arena_ for one batch size (gpt_cuda.cpp)
  template <typename X>
  struct Pass;  // one forward (and backward) pass with activations of type X (gpt_cuda.cpp)
  // The arena carved for `batch` with activations of x_bytes each (grown when needed).
  Acts carve(size_t batch, size_t x_bytes);
  // Forward, then backward when d_grad is given.
  template <typename X>
  void run(const float* d_params, size_t batch, float* d_grad, const Model::TensorReady& on_ready);
  void upload(const BatchView& batch);

  Gpt layout_;  // names, shapes, offsets and the CPU checks; its CPU scratch is never used
  GptConfig config_;
  Precision precision_;
  size_t vocab_padded_;  // the logits' row stride: vocab rounded up to 64
  size_t head_rows_;     // the tied head's GEMM rows: vocab_padded_ where the layout allows
  std::vector<uint64_t> offsets_;
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer<char> workspace_;            // cuBLASLt's
  DeviceBuffer<__nv_bfloat16> weights_;     // bf16 only: (parameter_count)
  DeviceBuffer<char> arena_;                // activations and scratch, grown to the largest batch
  DeviceBuffer<int32_t> inputs_, targets_;  // (B, T)
  std::vector<int32_t> host_inputs_, host_targets_;
  DeviceBuffer<double> sums_;  // (2): loss sum, correct
  size_t predictions_ = 0;
};

}  // namespace geotrain::models
