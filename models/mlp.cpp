#include "models/mlp.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "core/error.hpp"
#include "kernels/model_cpu.hpp"

namespace geotrain::models {

namespace kc = geotrain::kernels::cpu;

MlpConfig parse_mlp_config(const std::string& spec) {
  if (spec == "softmax") return softmax_regression_config();
  std::vector<size_t> sizes;
  std::stringstream in(spec);
  std::string part;
  while (std::getline(in, part, '-')) {
    size_t used = 0;
    unsigned long long v = 0;
    try {
      v = std::stoull(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    GT_REQUIRE(used == part.size() && !part.empty() && v > 0 && v < (1ull << 24),
               "model spec '{}': '{}' is not a layer size", spec, part);
    sizes.push_back(static_cast<size_t>(v));
  }
  GT_REQUIRE(sizes.size() >= 2, "model spec '{}': needs at least inputs-classes", spec);
  return MlpConfig{sizes.front(), std::vector<size_t>(sizes.begin() + 1, sizes.end() - 1),
                   sizes.back()};
}

Mlp::Mlp(MlpConfig config) : config_(std::move(config)) {
  GT_REQUIRE(config_.inputs > 0 && config_.classes > 0, "mlp: inputs {} and classes {} must be > 0",
             config_.inputs, config_.classes);
  size_t in = config_.inputs;
  uint64_t offset = 0;
  std::vector<size_t> outs = config_.hidden;
  outs.push_back(config_.classes);
  for (size_t out : outs) {
    GT_REQUIRE(out > 0, "mlp: a hidden layer has size 0");
    LayerShape l{in, out, offset, offset + in * out};
    offset += in * out + out;
    layers_.push_back(l);
    in = out;
  }
  parameter_count_ = offset;
  acts_.resize(layers_.size());
}

std::vector<std::vector<uint64_t>> Mlp::tensor_shapes() const {
  std::vector<std::vector<uint64_t>> shapes;
  for (const LayerShape& l : layers_) {
    shapes.push_back({l.out, l.in});
    shapes.push_back({l.out});
  }
  return shapes;
}

std::vector<TensorSpec> Mlp::tensor_specs() const {
  std::vector<TensorSpec> specs;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const std::string name = "fc" + std::to_string(l + 1);
    specs.push_back({name + ".weight", layers_[l].in * layers_[l].out});
    specs.push_back({name + ".bias", layers_[l].out});
  }
  return specs;
}

BatchResult Mlp::forward_backward(ConstFloatSpan params, const BatchView& batch, FloatSpan grad,
                                  const TensorReady& on_ready) {
  GT_REQUIRE(batch.x != nullptr && batch.labels != nullptr,
             "mlp: the batch has no features or labels (is the data a text corpus?)");
  LayerReady layer_ready;
  if (on_ready)
    layer_ready = [&](size_t layer) {
      on_ready(2 * layer);
      on_ready(2 * layer + 1);
    };
  return forward_backward(params, batch.x, batch.labels, batch.batch, grad, layer_ready);
}

BatchResult Mlp::evaluate(ConstFloatSpan params, const BatchView& batch) {
  GT_REQUIRE(batch.x != nullptr && batch.labels != nullptr,
             "mlp: the batch has no features or labels (is the data a text corpus?)");
  return evaluate(params, batch.x, batch.labels, batch.batch);
}

void Mlp::init(FloatSpan params, uint64_t seed) const {
  GT_REQUIRE(params.size() == parameter_count_, "mlp init: {} parameters, model has {}",
             params.size(), parameter_count_);
  std::mt19937_64 rng(seed);
  for (const LayerShape& l : layers_) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(l.in));
    std::uniform_real_distribution<float> u(-bound, bound);
    for (size_t i = 0; i < l.in * l.out + l.out; ++i) params[l.weight_offset + i] = u(rng);
  }
}

BatchResult Mlp::forward(ConstFloatSpan params, const float* x, const int32_t* labels, size_t batch,
                         bool want_grad) {
  GT_REQUIRE(params.size() == parameter_count_, "mlp: {} parameters, model has {}", params.size(),
             parameter_count_);
  GT_REQUIRE(batch > 0, "mlp: empty batch");
  for (size_t i = 0; i < batch; ++i)
    GT_REQUIRE(labels[i] >= 0 && static_cast<size_t>(labels[i]) < config_.classes,
               "mlp: label {} at row {} is not in [0, {})", labels[i], i, config_.classes);
  const float* in = x;  // (B, l.in)
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerShape& s = layers_[l];
    acts_[l].resize(batch * s.out);  // (B, s.out)
    kc::linear_forward(in, params.data() + s.weight_offset, params.data() + s.bias_offset, batch,
                       s.in, s.out, acts_[l].data());
    if (l + 1 < layers_.size()) kc::relu_forward(acts_[l].data(), acts_[l].size());
    in = acts_[l].data();
  }
  dlogits_.resize(batch * config_.classes);  // (B, classes)
  BatchResult r;
  r.predictions = batch;
  r.loss_sum = kc::softmax_cross_entropy(acts_.back().data(), labels, batch, config_.classes,
                                         want_grad ? dlogits_.data() : nullptr, &r.correct);
  return r;
}

BatchResult Mlp::evaluate(ConstFloatSpan params, const float* x, const int32_t* labels,
                          size_t batch) {
  return forward(params, x, labels, batch, false);
}

BatchResult Mlp::forward_backward(ConstFloatSpan params, const float* x, const int32_t* labels,
                                  size_t batch, FloatSpan grad, const LayerReady& on_layer_ready) {
  GT_REQUIRE(grad.size() == parameter_count_, "mlp: gradient has {} elements, model has {}",
             grad.size(), parameter_count_);
  const BatchResult r = forward(params, x, labels, batch, true);
  size_t widest = 0;
  for (const LayerShape& s : layers_) widest = std::max(widest, s.in);
  dact_a_.resize(batch * widest);
  dact_b_.resize(batch * widest);
  const float* dy = dlogits_.data();  // (B, s.out) of the current layer
  for (size_t l = layers_.size(); l-- > 0;) {
    const LayerShape& s = layers_[l];
    const float* layer_in = l == 0 ? x : acts_[l - 1].data();  // (B, s.in)
    float* dx = l == 0 ? nullptr : (dy == dact_a_.data() ? dact_b_.data() : dact_a_.data());
    kc::linear_backward(layer_in, params.data() + s.weight_offset, dy, batch, s.in, s.out,
                        grad.data() + s.weight_offset, grad.data() + s.bias_offset, dx);
    // Layer l's weight and bias gradients are final: their AllReduce may start now, while the
    // layers below are still being differentiated (it touches only those two tensors).
    if (on_layer_ready) on_layer_ready(l);
    if (dx != nullptr) kc::relu_backward(layer_in, dx, batch * s.in);
    dy = dx;
  }
  return r;
}

}  // namespace geotrain::models
