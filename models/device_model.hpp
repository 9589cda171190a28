// DeviceModel: a model whose forward and backward run on one GPU, as the device-resident trainer
// (worker/cuda_model_backend) drives it. MlpCuda and GptCuda implement it, so the trainer names
// no model kind: it owns the fp32 master parameters and the gradient accumulator (device
// buffers in the layout of the model's ParamTable), and the model owns its handles, stream,
// activations and the batch's upload.
//
// Contracts shared by every implementation:
//   - batches come from the host (BatchView: features and labels for a classifier, tokens for a
//     language model); the model checks what its device path cannot (labels, tokens in range:
//     InputError naming the row) and copies them to the device on stream();
//   - forward_backward adds d(batch-mean loss)/d(params) into d_grad (parameter_count) and the
//     batch's loss and argmax counts into a result accumulator; forward adds only the latter;
//     take_result() waits for the stream, returns the accumulator and clears it;
//   - on_ready(tensor), where the model reports finished tensors (reports_ready_tensors()), is
//     called during backward once the kernels that finish that tensor's gradient are queued.
// Not thread-safe: one per thread and device.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "models/model.hpp"
#include "models/model_spec.hpp"

namespace geotrain::models {

enum class Precision { kFp32, kBf16 };
// "fp32" or "bf16"; InputError naming worker.precision otherwise.
Precision parse_precision(const std::string& name);
const char* precision_name(Precision p);

class DeviceModel {
 public:
  virtual ~DeviceModel() = default;

  virtual cudaStream_t stream() const = 0;
  virtual uint64_t parameter_count() const = 0;
  // The host model of the same layout: tensor names, shapes and offsets (make_table()).
  virtual const Model& layout() const = 0;
  // Whether backward calls on_ready per tensor (a bucketed AllReduce can then overlap it).
  virtual bool reports_ready_tensors() const { return false; }

  virtual void forward_backward(const float* d_params, const BatchView& batch, float* d_grad,
                                const Model::TensorReady& on_ready = {}) = 0;
  virtual void forward(const float* d_params, const BatchView& batch) = 0;
  virtual BatchResult take_result() = 0;

  // Mixed precision: the bf16 copy of the weights the GEMMs read, written by the fused
  // optimizer step (null for an fp32 model), and its refresh after the parameters changed
  // another way (nothing to do for fp32).
  virtual __nv_bfloat16* weight_copy() { return nullptr; }
  virtual void refresh_weights(const float* /*d_params*/) {}
};

// The model of `spec` on the current device: MlpCuda for model.kind mlp (fp32 only), GptCuda
// for gpt. InputError for another kind, or bf16 with an MLP.
std::unique_ptr<DeviceModel> make_device_model(const ModelSpec& spec, Precision precision);

}  // namespace geotrain::models
