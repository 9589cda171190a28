#include "models/mlp_cuda.hpp"

#include <algorithm>
#include <utility>

#include "core/check_cuda.hpp"
#include "kernels/model_cuda.cuh"

namespace geotrain::models {

namespace kg = geotrain::kernels::cuda;

MlpCuda::MlpCuda(MlpConfig config) : layout_(std::move(config)) {
  GT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  if (cublasStatus_t rc = cublasCreate(&handle_); rc != CUBLAS_STATUS_SUCCESS) {
    cudaStreamDestroy(stream_);
    GT_CUBLAS_CHECK(rc);
  }
  acts_.resize(layout_.layers().size());
}

MlpCuda::~MlpCuda() {
  cublasDestroy(handle_);
  cudaStreamDestroy(stream_);
}

void MlpCuda::upload(const BatchView& batch) {
  GT_REQUIRE(batch.batch > 0, "mlp (cuda): empty batch");
  GT_REQUIRE(batch.x != nullptr && batch.labels != nullptr,
             "the CUDA MLP needs features and labels");
  const MlpConfig& cfg = layout_.config();
  for (size_t i = 0; i < batch.batch; ++i)
    GT_REQUIRE(batch.labels[i] >= 0 && static_cast<size_t>(batch.labels[i]) < cfg.classes,
               "label {} at row {} is not in [0, {})", batch.labels[i], i, cfg.classes);
  d_x_.reserve(batch.batch * cfg.inputs);
  d_y_.reserve(batch.batch);
  GT_CUDA_CHECK(cudaMemcpyAsync(d_x_.get(), batch.x, batch.batch * cfg.inputs * sizeof(float),
                                cudaMemcpyHostToDevice, stream_));
  GT_CUDA_CHECK(cudaMemcpyAsync(d_y_.get(), batch.labels, batch.batch * sizeof(int32_t),
                                cudaMemcpyHostToDevice, stream_));
}

BatchResult MlpCuda::run_forward(const float* d_params, size_t batch, bool want_grad) {
  const int32_t* d_labels = d_y_.get();
  const auto& layers = layout_.layers();
  const float* in = d_x_.get();  // (B, l.in)
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerShape& s = layers[l];
    acts_[l].reserve(batch * s.out);  // (B, s.out)
    kg::linear_forward(handle_, in, d_params + s.weight_offset, d_params + s.bias_offset, batch,
                       s.in, s.out, acts_[l].get(), stream_);
    if (l + 1 < layers.size()) kg::relu_forward(acts_[l].get(), batch * s.out, stream_);
    in = acts_[l].get();
  }
  const size_t classes = layout_.config().classes;
  dlogits_.reserve(batch * classes);
  losses_.reserve(batch);
  correct_.reserve(batch);
  kg::softmax_cross_entropy(acts_.back().get(), d_labels, batch, classes,
                            want_grad ? dlogits_.get() : nullptr, losses_.get(), correct_.get(),
                            stream_);
  // TODO(perf): reduce on the device and read back two scalars instead of 2B values.
  std::vector<float> losses(batch);
  std::vector<int32_t> correct(batch);
  GT_CUDA_CHECK(cudaMemcpyAsync(losses.data(), losses_.get(), batch * sizeof(float),
                                cudaMemcpyDeviceToHost, stream_));
  GT_CUDA_CHECK(cudaMemcpyAsync(correct.data(), correct_.get(), batch * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, stream_));
  GT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  BatchResult r;
  r.predictions = batch;
  for (size_t i = 0; i < batch; ++i) {
    r.loss_sum += losses[i];
    r.correct += static_cast<size_t>(correct[i]);
  }
  return r;
}

void MlpCuda::forward(const float* d_params, const BatchView& view) {
  upload(view);
  const BatchResult r = run_forward(d_params, view.batch, false);
  result_.loss_sum += r.loss_sum;
  result_.correct += r.correct;
  result_.predictions += r.predictions;
}

BatchResult MlpCuda::take_result() {
  GT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return std::exchange(result_, BatchResult{});
}

void MlpCuda::forward_backward(const float* d_params, const BatchView& view, float* d_grad,
                               const Model::TensorReady& /*on_ready: not reported*/) {
  GT_REQUIRE(d_grad != nullptr, "mlp (cuda): forward_backward without a gradient buffer");
  upload(view);
  const size_t batch = view.batch;
  const float* d_x = d_x_.get();
  const BatchResult r = run_forward(d_params, batch, true);
  const auto& layers = layout_.layers();
  size_t widest = 0;
  for (const LayerShape& s : layers) widest = std::max(widest, s.in);
  dact_a_.reserve(batch * widest);
  dact_b_.reserve(batch * widest);
  const float* dy = dlogits_.get();  // (B, s.out)
  for (size_t l = layers.size(); l-- > 0;) {
    const LayerShape& s = layers[l];
    const float* layer_in = l == 0 ? d_x : acts_[l - 1].get();  // (B, s.in)
    float* dx = l == 0 ? nullptr : (dy == dact_a_.get() ? dact_b_.get() : dact_a_.get());
    kg::linear_backward(handle_, layer_in, d_params + s.weight_offset, dy, batch, s.in, s.out,
                        d_grad + s.weight_offset, d_grad + s.bias_offset, dx, stream_);
    if (dx != nullptr) kg::relu_backward(layer_in, dx, batch * s.in, stream_);
    dy = dx;
  }
  GT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  result_.loss_sum += r.loss_sum;
  result_.correct += r.correct;
  result_.predictions += r.predictions;
}

}  // namespace geotrain::models
