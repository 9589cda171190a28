// Model: the interface every model of the zoo implements (the MLP classifier, the GPT language
// model), so that the trainer, the leader, checkpoints and reports never know which one runs.
//
// A model owns its architecture and CPU scratch space. It does not own parameters or
// gradients: they are spans over a ParamTable's flat layout (make_table()), in the order of
// tensor_specs(). forward_backward accumulates (+=) the gradient of the batch-mean loss into
// `grad`, so gradient accumulation is zero once + several calls. Not thread-safe (scratch space
// is reused): one model per thread; a model may use several threads inside one call
// (kernels::cpu::set_threads). Nothing blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/param_table.hpp"
#include "core/span.hpp"

namespace geotrain::models {

// One batch as a model reads it; pointers borrow host memory for the call.
//   classifiers: x (batch, inputs) and labels (batch);
//   language models: tokens (batch, seq_len + 1): inputs are [0, T), targets are [1, T].
struct BatchView {
  size_t batch = 0;
  const float* x = nullptr;
  const int32_t* labels = nullptr;
  const int32_t* tokens = nullptr;
};

struct BatchResult {
  double loss_sum = 0;     // summed over every prediction; mean = loss_sum / predictions
  size_t correct = 0;      // predictions whose argmax is the target
  size_t predictions = 0;  // rows for a classifier, batch * seq_len tokens for a language model
  double mean_loss() const { return predictions ? loss_sum / double(predictions) : 0.0; }
};

class Model {
 public:
  virtual ~Model() = default;

  // "mlp" or "gpt".
  virtual std::string kind() const = 0;
  virtual std::vector<TensorSpec> tensor_specs() const = 0;
  virtual uint64_t parameter_count() const = 0;
  // Each tensor's shape, in tensor_specs() order (weights (out, in) as nn.Linear): what files
  // for other tools (safetensors) record. The product of a shape is the tensor's size.
  virtual std::vector<std::vector<uint64_t>> tensor_shapes() const = 0;
  // The tensors with their matrix columns (TensorSpec::cols) from tensor_shapes(): a 2-D
  // tensor's second dimension.
  std::vector<TensorSpec> shaped_specs() const;
  ParamTable make_table(const std::vector<std::string>& critical_globs = {}) const {
    return ParamTable(shaped_specs(), critical_globs);
  }
  // Deterministic initialisation from `seed` (the same parameters in every process).
  virtual void init(FloatSpan params, uint64_t seed) const = 0;

  // Called during backward with a tensor index (into tensor_specs()) once that tensor's
  // gradient is final for this call, so that its AllReduce may start early.
  using TensorReady = std::function<void(size_t tensor)>;
  // grad += d(batch-mean loss)/d(params). InputError on a span of the wrong size, a missing
  // input, or a label or token out of range.
  virtual BatchResult forward_backward(ConstFloatSpan params, const BatchView& batch,
                                       FloatSpan grad, const TensorReady& on_ready = {}) = 0;
  // Forward only: loss and argmax counts.
  virtual BatchResult evaluate(ConstFloatSpan params, const BatchView& batch) = 0;
};

}  // namespace geotrain::models
