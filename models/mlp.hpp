// Mlp: a multi-layer perceptron classifier (ReLU between layers, softmax cross-entropy on top),
// on the CPU. With no hidden layers it is softmax (multinomial logistic) regression.
//
// Owns: the architecture and CPU scratch space for activations. Parameters and gradients are not
// owned: they are spans over a ParamTable's flat layout (make_table()), tensors in the order
// fc1.weight (h1, in), fc1.bias (h1), fc2.weight (h2, h1), ..., fcL.bias (classes), weights
// row-major (out, in) as in PyTorch's nn.Linear. forward_backward accumulates (+=) the gradient
// of the batch-mean loss into `grad`, so gradient accumulation is zero once + several calls.
// Not thread-safe (scratch space is reused); use one Mlp per thread. Nothing blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/param_table.hpp"
#include "core/span.hpp"
#include "models/model.hpp"

namespace geotrain::models {

struct MlpConfig {
  size_t inputs = 784;
  std::vector<size_t> hidden = {256, 128};
  size_t classes = 10;
};

// Softmax regression: inputs -> classes, no hidden layer.
inline MlpConfig softmax_regression_config(size_t inputs = 784, size_t classes = 10) {
  return MlpConfig{inputs, {}, classes};
}

// Parses "784-256-128-10" (inputs-hidden...-classes) or "softmax" (784-10); InputError otherwise.
MlpConfig parse_mlp_config(const std::string& spec);

struct LayerShape {
  size_t in = 0, out = 0;
  size_t weight_offset = 0, bias_offset = 0;  // into the flat buffer
};

class Mlp final : public Model {
 public:
  // InputError when a size is 0.
  explicit Mlp(MlpConfig config);

  const MlpConfig& config() const { return config_; }
  const std::vector<LayerShape>& layers() const { return layers_; }
  std::string kind() const override { return "mlp"; }
  std::vector<TensorSpec> tensor_specs() const override;
  uint64_t parameter_count() const override { return parameter_count_; }
  std::vector<std::vector<uint64_t>> tensor_shapes() const override;

  // PyTorch's nn.Linear default: weights and biases uniform in +-1/sqrt(in), from `seed`.
  void init(FloatSpan params, uint64_t seed) const override;

  // Model: batch.x (B, inputs) and batch.labels (B); tensors 2l and 2l+1 become ready together.
  BatchResult forward_backward(ConstFloatSpan params, const BatchView& batch, FloatSpan grad,
                               const TensorReady& on_ready = {}) override;
  BatchResult evaluate(ConstFloatSpan params, const BatchView& batch) override;

  // Called during backward with a layer index once that layer's weight and bias gradients
  // (tensors 2l and 2l+1 of the table) are final, last layer first.
  using LayerReady = std::function<void(size_t layer)>;
  // x (B, inputs), labels (B) in [0, classes). grad += d(mean loss)/d(params).
  // InputError on a span of the wrong size or a label out of range.
  BatchResult forward_backward(ConstFloatSpan params, const float* x, const int32_t* labels,
                               size_t batch, FloatSpan grad, const LayerReady& on_layer_ready = {});
  // Forward only: loss and accuracy counts.
  BatchResult evaluate(ConstFloatSpan params, const float* x, const int32_t* labels, size_t batch);

 private:
  BatchResult forward(ConstFloatSpan params, const float* x, const int32_t* labels, size_t batch,
                      bool want_grad);

  MlpConfig config_;
  std::vector<LayerShape> layers_;
  uint64_t parameter_count_ = 0;
  std::vector<std::vector<float>> acts_;  // acts_[l]: (B, layers_[l].out), post-ReLU for hidden
  std::vector<float> dlogits_;            // (B, classes)
  std::vector<float> dact_a_, dact_b_;    // (B, widest layer), ping-pong
};

}  // namespace geotrain::models
