#include "worker/backend/cuda_model_backend.hpp"

#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "core/check_cuda.hpp"
#include "core/device_buffer.hpp"
#include "core/error.hpp"
#include "kernels/optim_cuda.cuh"
#include "models/device_model.hpp"
#include "worker/leader/device_leader_params.hpp"
#include "worker/region/bucketed_allreduce.hpp"
#include "worker/region/nccl_communicator.hpp"

namespace geotrain::worker {
namespace {

using geotrain::DeviceBuffer;

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

// The region's gradient AllReduce in buckets (worker.bucket_cap_mb), each queued on the NCCL
// stream behind the backward kernels that finish it (NcclCommunicator::allreduce_sum_after), so
// communication overlaps the rest of backward. BucketedAllReduce (run in the calling thread)
// plans the buckets and decides when one is complete; this Communicator only queues.
class QueuedNcclReduce final : public Communicator {
 public:
  QueuedNcclReduce(NcclCommunicator& nccl, cudaStream_t producer)
      : nccl_(nccl), producer_(producer) {}
  int rank() const override { return nccl_.rank(); }
  int size() const override { return nccl_.size(); }
  void allreduce_sum(FloatSpan data) override { nccl_.allreduce_sum_after(data, producer_); }
  void broadcast(FloatSpan, int) override {
    GT_ASSERT(false, "QueuedNcclReduce only reduces gradient buckets");
  }

 private:
  NcclCommunicator& nccl_;
  cudaStream_t producer_;
};

class CudaModelBackend final : public ModelBackend, public ResidentTraining {
 public:
  CudaModelBackend(const models::ModelSpec& spec, int device, models::Precision precision)
      : device_(select(device)), model_(models::make_device_model(spec, precision)) {
    stream_ = model_->stream();
    parameters_ = model_->parameter_count();
    d_params_ = DeviceBuffer<float>(parameters_);
    d_grad_ = DeviceBuffer<float>(parameters_);
    grad_staging_.resize(parameters_);
    d_norm_ = DeviceBuffer<double>(1);
    GT_CUDA_CHECK(cudaMemsetAsync(d_grad_.get(), 0, parameters_ * sizeof(float), stream_));
    GT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  ResidentTraining* resident() override { return this; }

  std::unique_ptr<Communicator> connect_region(gloo::rendezvous::Store& store, int rank, int size,
                                               const RegionOptions& options) override {
    GT_ASSERT(nccl_ == nullptr, "connect_region called twice");
    nccl_ = std::make_unique<NcclCommunicator>(store, rank, size, options.timeout);
    GT_ASSERT(nccl_->device() == device_, "NCCL chose device {}, the model lives on device {}",
              nccl_->device(), device_);
    // Bucketed overlap for a model whose backward reports finished tensors (the GPT; the MLP's
    // does not: one AllReduce after backward).
    if (model_->reports_ready_tensors() && options.bucket_cap_mb > 0) {
      queued_ = std::make_unique<QueuedNcclReduce>(*nccl_, stream_);
      buckets_ = std::make_unique<BucketedAllReduce>(
          *queued_, model_->layout().make_table().tensors(), options.bucket_cap_mb);
    }
    return std::make_unique<HostStagedCommunicator>(*nccl_);
  }

  // ---- host-driven ----

  models::BatchResult forward_backward(ConstFloatSpan params, const Batch& batch, FloatSpan grad,
                                       bool last = true) override {
    GT_REQUIRE(grad.size() == parameters_, "gradient span has {} elements, the model has {}",
               grad.size(), parameters_);
    upload_parameters(params);
    return accumulate(batch, last);
  }

  void reduce_gradient(FloatSpan grad) override {
    GT_REQUIRE(grad.size() == parameters_, "gradient span has {} elements, the model has {}",
               grad.size(), parameters_);
    reduce_in_place();
    GT_CUDA_CHECK(cudaMemcpyAsync(grad_staging_.data(), d_grad_.get(), parameters_ * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream_));
    GT_CUDA_CHECK(cudaMemsetAsync(d_grad_.get(), 0, parameters_ * sizeof(float), stream_));
    GT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (size_t i = 0; i < parameters_; ++i) grad[i] += grad_staging_[i];
  }

  models::BatchResult evaluate(ConstFloatSpan params, const models::BatchView& batch) override {
    upload_parameters(params);
    model_->forward(d_params_.get(), batch);
    return model_->take_result();
  }

  // ---- device-resident ----

  void prepare_optimizer(const OptimizerConfig& config,
                         const std::vector<uint8_t>& decay_mask) override {
    GT_REQUIRE(decay_mask.empty() || decay_mask.size() == parameters_,
               "decay mask has {} elements, the model has {}", decay_mask.size(), parameters_);
    // The config parser refuses this first (worker.optimizer.kind muon with worker.device cuda).
    GT_REQUIRE(config.kind != OptimizerKind::kMuon,
               "worker.optimizer.kind muon runs on the CPU only: the device-resident step has sgd "
               "and adamw");
    optimizer_ = config;
    const bool adam = config.kind == OptimizerKind::kAdamW;
    d_m_ = DeviceBuffer<float>(adam || config.momentum > 0 ? parameters_ : 0);
    d_v_ = DeviceBuffer<float>(adam ? parameters_ : 0);
    if (d_m_.size() > 0)
      GT_CUDA_CHECK(cudaMemsetAsync(d_m_.get(), 0, parameters_ * sizeof(float), stream_));
    if (d_v_.size() > 0)
      GT_CUDA_CHECK(cudaMemsetAsync(d_v_.get(), 0, parameters_ * sizeof(float), stream_));
    d_mask_ = DeviceBuffer<uint8_t>(decay_mask.size());
    if (!decay_mask.empty())
      GT_CUDA_CHECK(cudaMemcpyAsync(d_mask_.get(), decay_mask.data(), decay_mask.size(),
                                    cudaMemcpyHostToDevice, stream_));
    GT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    prepared_ = true;
  }

  void upload_parameters(ConstFloatSpan host) override {
    GT_REQUIRE(host.size() == parameters_, "parameter span has {} elements, the model has {}",
               host.size(), parameters_);
    GT_CUDA_CHECK(cudaSetDevice(device_));
    GT_CUDA_CHECK(cudaMemcpyAsync(d_params_.get(), host.data(), host.size_bytes(),
                                  cudaMemcpyHostToDevice, stream_));
    model_->refresh_weights(d_params_.get());
    GT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // pageable: the host span may change after
  }

  std::unique_ptr<LeaderParams> leader_params(OverlapMode mode, OuterStepConfig outer,
                                              uint32_t regions, ConstFloatSpan global) override {
    GT_CUDA_CHECK(cudaSetDevice(device_));
    return std::make_unique<DeviceLeaderParams>(
        d_params_.get(), parameters_, stream_, [this] { model_->refresh_weights(d_params_.get()); },
        mode, outer, regions, global);
  }

  void download_parameters(FloatSpan host) override {
    GT_REQUIRE(host.size() == parameters_, "parameter span has {} elements, the model has {}",
               host.size(), parameters_);
    GT_CUDA_CHECK(cudaMemcpyAsync(host.data(), d_params_.get(), host.size_bytes(),
                                  cudaMemcpyDeviceToHost, stream_));
    GT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void upload_optimizer_state(ConstFloatSpan m, ConstFloatSpan v) override {
    GT_ASSERT(prepared_, "optimizer state uploaded before prepare_optimizer");
    GT_REQUIRE(m.size() == d_m_.size() && v.size() == d_v_.size(),
               "optimizer state of {} + {} values does not fit the device's {} + {}", m.size(),
               v.size(), d_m_.size(), d_v_.size());
    if (!m.empty())
      GT_CUDA_CHECK(
          cudaMemcpyAsync(d_m_.get(), m.data(), m.size_bytes(), cudaMemcpyHostToDevice, stream_));
    if (!v.empty())
      GT_CUDA_CHECK(
          cudaMemcpyAsync(d_v_.get(), v.data(), v.size_bytes(), cudaMemcpyHostToDevice, stream_));
    GT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void download_optimizer_state(FloatSpan m, FloatSpan v) override {
    GT_ASSERT(prepared_, "optimizer state read before prepare_optimizer");
    GT_REQUIRE(m.size() == d_m_.size() && v.size() == d_v_.size(),
               "optimizer state of {} + {} values does not fit the device's {} + {}", m.size(),
               v.size(), d_m_.size(), d_v_.size());
    if (!m.empty())
      GT_CUDA_CHECK(
          cudaMemcpyAsync(m.data(), d_m_.get(), m.size_bytes(), cudaMemcpyDeviceToHost, stream_));
    if (!v.empty())
      GT_CUDA_CHECK(
          cudaMemcpyAsync(v.data(), d_v_.get(), v.size_bytes(), cudaMemcpyDeviceToHost, stream_));
    GT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  models::BatchResult accumulate(const Batch& batch, bool last) override {
    GT_CUDA_CHECK(cudaSetDevice(device_));
    // The step's last micro-batch finishes each tensor's gradient: its buckets may start.
    models::Model::TensorReady ready;
    if (buckets_ && last)
      ready = [this](size_t tensor) {
        buckets_->tensor_ready(tensor, {d_grad_.get(), parameters_});
      };
    models::BatchView view;
    view.batch = batch.size;
    view.x = batch.x.empty() ? nullptr : batch.x.data();
    view.labels = batch.y.empty() ? nullptr : batch.y.data();
    view.tokens = batch.tokens.empty() ? nullptr : batch.tokens.data();
    // d_grad_ (parameter_count) += d(mean loss)/d(params)
    model_->forward_backward(d_params_.get(), view, d_grad_.get(), ready);
    return model_->take_result();
  }

  double reduce_gradient_norm_sq() override {
    reduce_in_place();
    kernels::cuda::sum_of_squares(d_norm_.get(), d_grad_.get(), parameters_, stream_);
    double norm_sq = 0;
    GT_CUDA_CHECK(
        cudaMemcpyAsync(&norm_sq, d_norm_.get(), sizeof(double), cudaMemcpyDeviceToHost, stream_));
    GT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return norm_sq;
  }

  void apply_step(const ResidentStep& step) override {
    GT_ASSERT(prepared_, "apply_step before prepare_optimizer");
    const uint8_t* mask = d_mask_.size() > 0 ? d_mask_.get() : nullptr;
    __nv_bfloat16* copy = model_->weight_copy();
    if (step.accept && optimizer_.kind == OptimizerKind::kAdamW) {
      kernels::cuda::AdamWStep s;
      s.lr = step.lr;
      s.beta1 = optimizer_.beta1;
      s.beta2 = optimizer_.beta2;
      s.eps = optimizer_.eps;
      s.weight_decay = optimizer_.weight_decay;
      // worker/training/optimizer.cpp's bias corrections, in double then rounded, as there.
      const double t = static_cast<double>(step.t);
      s.bias_correction1 = static_cast<float>(1.0 - std::pow(double(optimizer_.beta1), t));
      s.bias_correction2_sqrt =
          static_cast<float>(std::sqrt(1.0 - std::pow(double(optimizer_.beta2), t)));
      s.grad_scale = step.grad_scale;
      kernels::cuda::adamw_step(d_params_.get(), d_m_.get(), d_v_.get(), d_grad_.get(), mask,
                                parameters_, s, copy, stream_);
    } else if (step.accept) {
      kernels::cuda::SgdStep s;
      s.lr = step.lr;
      s.momentum = optimizer_.momentum;
      s.weight_decay = optimizer_.weight_decay;
      s.nesterov = optimizer_.nesterov;
      s.first = step.t == 1;
      s.grad_scale = step.grad_scale;
      kernels::cuda::sgd_step(d_params_.get(), d_m_.size() > 0 ? d_m_.get() : nullptr,
                              d_grad_.get(), mask, parameters_, s, copy, stream_);
    }
    // Queued behind the step; the next call that needs the device waits for both.
    GT_CUDA_CHECK(cudaMemsetAsync(d_grad_.get(), 0, parameters_ * sizeof(float), stream_));
  }

 private:
  static int select(int device) {
    GT_CUDA_CHECK(cudaSetDevice(device));
    return device;
  }

  // The region's sum of d_grad_, in place (nothing to do for a region of one worker).
  void reduce_in_place() {
    GT_CUDA_CHECK(cudaSetDevice(device_));
    if (buckets_) {
      // Queues the buckets backward did not complete (all of them when no micro-batch was
      // marked last), then waits for every bucket's AllReduce.
      buckets_->finish({d_grad_.get(), parameters_});
      nccl_->synchronize();
      return;
    }
    GT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the accumulation is complete
    if (nccl_)
      nccl_->allreduce_sum({d_grad_.get(), parameters_});  // blocks until its stream is done
  }

  int device_;
  std::unique_ptr<models::DeviceModel> model_;
  cudaStream_t stream_ = nullptr;  // the model's
  size_t parameters_ = 0;
  DeviceBuffer<float> d_params_;     // (parameter_count): fp32 master parameters
  DeviceBuffer<float> d_grad_;       // (parameter_count): the accumulator; zero after a step
  DeviceBuffer<float> d_m_, d_v_;    // optimizer state (parameter_count or empty)
  DeviceBuffer<uint8_t> d_mask_;     // (parameter_count) or empty: weight decay applies
  DeviceBuffer<double> d_norm_;      // (1): the squared norm
  std::vector<float> grad_staging_;  // (parameter_count), host
  OptimizerConfig optimizer_;
  bool prepared_ = false;
  std::unique_ptr<NcclCommunicator> nccl_;      // after connect_region; the region has > 1 worker
  std::unique_ptr<QueuedNcclReduce> queued_;    // GPT with bucket_cap_mb > 0: over nccl_
  std::unique_ptr<BucketedAllReduce> buckets_;  // over queued_
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

std::string cuda_device_name(int device) {
  cudaDeviceProp prop{};
  GT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

std::unique_ptr<ModelBackend> make_cuda_model_backend(const models::ModelSpec& spec, int rank,
                                                      const std::string& precision) {
  std::string why;
  const int devices = cuda_device_count(&why);
  GT_REQUIRE(devices > 0, "worker.device is 'cuda' but no CUDA device is visible ({})", why);
  GT_REQUIRE(rank >= 0, "rank {} is negative", rank);
  return std::make_unique<CudaModelBackend>(spec, rank % devices,
                                            models::parse_precision(precision));
}

}  // namespace geotrain::worker
