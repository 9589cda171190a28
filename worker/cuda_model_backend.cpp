#include "worker/cuda_model_backend.hpp"

#include <cuda_runtime.h>

#include <vector>

#include "core/check_cuda.hpp"
#include "core/error.hpp"
#include "models/device_buffer.hpp"
#include "models/mlp_cuda.hpp"
#include "worker/nccl_communicator.hpp"

namespace geotrain::worker {
namespace {

using models::DeviceBuffer;

// Host-span collectives over an NcclCommunicator: each call copies the span to a device
// staging buffer, runs the collective there, and copies the result back. For small or
// once-per-round data (the loss, the parameter broadcast); the gradient does not go this way.
class HostStagedCommunicator final : public Communicator {
 public:
  explicit HostStagedCommunicator(NcclCommunicator& nccl) : nccl_(nccl) {}
  int rank() const override { return nccl_.rank(); }
  int size() const override { return nccl_.size(); }
  void allreduce_sum(FloatSpan data) override {
    if (data.empty()) return;
    FloatSpan device = stage_in(data);
    nccl_.allreduce_sum(device);
    stage_out(data);
  }
  void broadcast(FloatSpan data, int root) override {
    if (data.empty()) return;
    FloatSpan device = stage_in(data);
    nccl_.broadcast(device, root);
    stage_out(data);
  }

 private:
  // Synchronous copies (cudaMemcpy: the host waits for them), so the NCCL stream sees the data.
  FloatSpan stage_in(ConstFloatSpan host) {
    GT_CUDA_CHECK(cudaSetDevice(nccl_.device()));
    staging_.reserve(host.size());
    GT_CUDA_CHECK(
        cudaMemcpy(staging_.get(), host.data(), host.size_bytes(), cudaMemcpyHostToDevice));
    GT_CUDA_CHECK(cudaDeviceSynchronize());  // pageable H2D may return before the DMA lands
    return {staging_.get(), host.size()};
  }
  void stage_out(FloatSpan host) {
    GT_CUDA_CHECK(
        cudaMemcpy(host.data(), staging_.get(), host.size_bytes(), cudaMemcpyDeviceToHost));
  }

  NcclCommunicator& nccl_;
  DeviceBuffer<float> staging_;  // (largest span seen)
};

class CudaModelBackend final : public ModelBackend {
 public:
  CudaModelBackend(const models::MlpConfig& config, int device)
      : device_(select(device)),
        mlp_(config),
        parameters_(mlp_.layout().parameter_count()),
        d_params_(parameters_),
        d_grad_(parameters_),
        grad_staging_(parameters_) {
    GT_CUDA_CHECK(cudaMemsetAsync(d_grad_.get(), 0, parameters_ * sizeof(float), mlp_.stream()));
    GT_CUDA_CHECK(cudaStreamSynchronize(mlp_.stream()));
  }

  std::unique_ptr<Communicator> connect_region(gloo::rendezvous::Store& store, int rank, int size,
                                               const RegionOptions& options) override {
    GT_ASSERT(nccl_ == nullptr, "connect_region called twice");
    nccl_ = std::make_unique<NcclCommunicator>(store, rank, size, options.timeout);
    GT_ASSERT(nccl_->device() == device_, "NCCL chose device {}, the model lives on device {}",
              nccl_->device(), device_);
    return std::make_unique<HostStagedCommunicator>(*nccl_);
  }

  models::BatchResult forward_backward(ConstFloatSpan params, const Batch& batch, FloatSpan grad,
                                       bool /*last*/ = true) override {
    GT_REQUIRE(grad.size() == parameters_, "gradient span has {} elements, the model has {}",
               grad.size(), parameters_);
    load(params, batch.x.data(), batch.y.data(), batch.size);
    // d_grad_ (parameter_count) += d(mean loss)/d(params); blocks until the stream is done.
    return mlp_.forward_backward(d_params_.get(), d_x_.get(), d_y_.get(), batch.size,
                                 d_grad_.get());
  }

  void reduce_gradient(FloatSpan grad) override {
    GT_REQUIRE(grad.size() == parameters_, "gradient span has {} elements, the model has {}",
               grad.size(), parameters_);
    GT_CUDA_CHECK(cudaSetDevice(device_));
    GT_CUDA_CHECK(cudaStreamSynchronize(mlp_.stream()));  // the accumulation is complete
    if (nccl_)
      nccl_->allreduce_sum({d_grad_.get(), parameters_});  // blocks until its stream is done
    GT_CUDA_CHECK(cudaMemcpyAsync(grad_staging_.data(), d_grad_.get(), parameters_ * sizeof(float),
                                  cudaMemcpyDeviceToHost, mlp_.stream()));
    GT_CUDA_CHECK(cudaMemsetAsync(d_grad_.get(), 0, parameters_ * sizeof(float), mlp_.stream()));
    GT_CUDA_CHECK(cudaStreamSynchronize(mlp_.stream()));
    for (size_t i = 0; i < parameters_; ++i) grad[i] += grad_staging_[i];
  }

  models::BatchResult evaluate(ConstFloatSpan params, const models::BatchView& batch) override {
    GT_REQUIRE(batch.x != nullptr && batch.labels != nullptr,
               "the CUDA MLP needs features and labels");
    load(params, batch.x, batch.labels, batch.batch);
    return mlp_.evaluate(d_params_.get(), d_x_.get(), d_y_.get(), batch.batch);
  }

 private:
  static int select(int device) {
    GT_CUDA_CHECK(cudaSetDevice(device));
    return device;
  }

  // Copies the parameters and a batch to the device, on the model's stream (so that its kernels
  // run after the copies), and checks what the device path does not: sizes and label range.
  void load(ConstFloatSpan params, const float* x, const int32_t* labels, size_t n) {
    const auto& cfg = mlp_.layout().config();
    GT_REQUIRE(params.size() == parameters_, "parameter span has {} elements, the model has {}",
               params.size(), parameters_);
    for (size_t i = 0; i < n; ++i)
      GT_REQUIRE(labels[i] >= 0 && static_cast<size_t>(labels[i]) < cfg.classes,
                 "label {} at row {} is not in [0, {})", labels[i], i, cfg.classes);
    GT_CUDA_CHECK(cudaSetDevice(device_));
    d_x_.reserve(n * cfg.inputs);
    d_y_.reserve(n);
    const cudaStream_t s = mlp_.stream();
    GT_CUDA_CHECK(cudaMemcpyAsync(d_params_.get(), params.data(), params.size_bytes(),
                                  cudaMemcpyHostToDevice, s));
    GT_CUDA_CHECK(
        cudaMemcpyAsync(d_x_.get(), x, n * cfg.inputs * sizeof(float), cudaMemcpyHostToDevice, s));
    GT_CUDA_CHECK(
        cudaMemcpyAsync(d_y_.get(), labels, n * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  }

  int device_;
  models::MlpCuda mlp_;
  size_t parameters_;
  DeviceBuffer<float> d_params_;  // (parameter_count), refreshed from the host each call
  DeviceBuffer<float> d_grad_;    // (parameter_count), the accumulator; zero after reduce_gradient
  DeviceBuffer<float> d_x_;       // (B, inputs), grown to the largest batch
  DeviceBuffer<int32_t> d_y_;     // (B)
  std::vector<float> grad_staging_;         // (parameter_count), host
  std::unique_ptr<NcclCommunicator> nccl_;  // after connect_region; the region has > 1 worker
};

}  // namespace

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    if (why != nullptr) *why = std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "cudaGetDeviceCount returned 0";
  return n;
}

std::unique_ptr<ModelBackend> make_cuda_model_backend(const models::MlpConfig& config, int rank) {
  std::string why;
  const int devices = cuda_device_count(&why);
  GT_REQUIRE(devices > 0, "worker.device is 'cuda' but no CUDA device is visible ({})", why);
  GT_REQUIRE(rank >= 0, "rank {} is negative", rank);
  return std::make_unique<CudaModelBackend>(config, rank % devices);
}

}  // namespace geotrain::worker
