// ModelBackend: where a worker's forward and backward run (worker.device: cpu | cuda), and the
// region connection that matches that memory (Gloo on host buffers, NCCL on device buffers).
//
// Two ways to train through it:
//   - host-driven (every backend): parameters, the optimizer and the LocalStep gradient
//     accumulator are host spans. Per optimizer step: forward_backward(params, batch, grad) for
//     each micro-batch, then reduce_gradient(grad), then read grad (the region's sum) and step
//     the host optimizer.
//   - device-resident (resident() is not null: the CUDA backend): parameters, the gradient
//     accumulator and the optimizer state stay on the device for the whole run; per step only
//     the loss and the gradient's squared norm come to the host (the anomaly guard and clipping
//     decide there). The trainer's host parameters are a mirror, refreshed when an exchange, an
//     evaluation or a checkpoint needs them (ResidentTraining below).
// Backends:
//   - CpuModelBackend: any models::Model (the MLP, the GPT), works in place on the host spans;
//     the region is Gloo.
//   - the CUDA backend (worker/backend/cuda_model_backend.hpp, CUDA + NCCL builds): a
//   models::DeviceModel
//     (MlpCuda, or GptCuda in fp32 or bf16, worker.precision) on one device; the region is NCCL.
// Calls block; not thread-safe (one trainer thread). Spans are borrowed for the call.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>

#include "core/error.hpp"
#include "core/span.hpp"
#include "models/model.hpp"
#include "models/model_spec.hpp"
#include "worker/data/batch_loader.hpp"
#include "worker/leader/leader_params.hpp"
#include "worker/region/bucketed_allreduce.hpp"
#include "worker/region/communicator.hpp"
#include "worker/training/optimizer.hpp"

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace geotrain::worker {

struct RegionOptions {
  std::string gloo_host = "127.0.0.1";       // the interface Gloo's TCP device binds to
  std::chrono::milliseconds timeout{30000};  // rendezvous
  // CPU: gradient AllReduce in buckets of about this many MiB, each started on a communication
  // thread as soon as backward has finished its layers (0: one AllReduce in reduce_gradient).
  double bucket_cap_mb = 25;
  // ZeRO stage 2 (worker/training/zero_shards.hpp): the gradient is reduce-scattered after
  // backward (reduce_scatter_gradient), not AllReduced in buckets during it.
  bool reduce_scatter = false;
};

// One device-side optimizer step (ResidentTraining::apply_step).
struct ResidentStep {
  bool accept = true;    // false: the guard refused the step; only the accumulator is cleared
  float lr = 0;          // the schedule's
  float grad_scale = 1;  // multiplies the region's summed gradient (average x clip)
  uint64_t t = 1;        // the optimizer's step count after this step (Adam's bias correction)
};

// What a backend offers when it trains device-resident. Every call blocks until its device work
// is done (the step's work stays queued on the device until the next call needs it).
class ResidentTraining {
 public:
  virtual ~ResidentTraining() = default;
  // Allocates the optimizer state (zeros) for `config`; decay_mask: 1 where weight decay
  // applies, empty for everywhere. Called once, before the first apply_step.
  virtual void prepare_optimizer(const OptimizerConfig& config,
                                 const std::vector<uint8_t>& decay_mask) = 0;
  virtual void upload_parameters(ConstFloatSpan host) = 0;
  virtual void download_parameters(FloatSpan host) = 0;
  // SGD: m is the momentum (empty without one), v empty; AdamW: both moments.
  virtual void upload_optimizer_state(ConstFloatSpan m, ConstFloatSpan v) = 0;
  virtual void download_optimizer_state(FloatSpan m, FloatSpan v) = 0;
  // Forward and backward of one micro-batch at the device parameters, accumulating the gradient
  // of its mean loss on the device; returns the loss sum and counts. `last`: the step's last
  // micro-batch (its gradients are final, so their AllReduce may start during backward).
  virtual models::BatchResult accumulate(const Batch& batch, bool last = true) = 0;
  // The region's sum of the accumulated gradients (in place, NCCL when connected) and its
  // squared L2 norm (non-finite when any element is).
  virtual double reduce_gradient_norm_sq() = 0;
  // The optimizer step at grad_scale x the reduced gradient (when accepted); clears the
  // accumulator either way.
  virtual void apply_step(const ResidentStep& step) = 0;
  // The region leader's parameters for its exchanges (worker/leader/leader_params.hpp): these
  // device parameters, with the overlap rule of (mode, outer, regions) kept and run on the device
  // from the global values `global` (worker/leader/device_leader_params.hpp). The object must not
  // outlive the backend.
  virtual std::unique_ptr<LeaderParams> leader_params(OverlapMode mode, OuterStepConfig outer,
                                                      uint32_t regions, ConstFloatSpan global) = 0;
};

class ModelBackend {
 public:
  // Not null when this backend trains device-resident; owned by the backend.
  virtual ResidentTraining* resident() { return nullptr; }

  virtual ~ModelBackend() = default;

  // Joins the region's `size` workers (rendezvous through `store`, which must outlive the call)
  // and returns a Communicator over HOST spans for the trainer's own collectives (the loss, the
  // parameter broadcast). The backend keeps using the same connection in reduce_gradient; the
  // returned Communicator must not outlive the backend. Not called for a region of one worker.
  virtual std::unique_ptr<Communicator> connect_region(gloo::rendezvous::Store& store, int rank,
                                                       int size, const RegionOptions& options) = 0;
  // Stops using connect_region's connection, which the caller is about to destroy (an elastic
  // region re-forms its group, worker/region/region_group.hpp); connect_region may be called
  // again. Whether the backend supports it: only the CPU's does (NCCL's region restarts instead).
  virtual bool can_reconnect_region() const { return false; }
  virtual void disconnect_region() {}
  // params: host (parameter_count). Accumulates this batch's gradient of the batch-mean loss;
  // where it accumulates is the backend's business: `grad` (host) holds it only after
  // reduce_gradient. `last`: the step's last micro-batch (its gradients are final, so their
  // AllReduce may start during backward). InputError on a size mismatch (and, on the CPU, a
  // label out of range).
  virtual models::BatchResult forward_backward(ConstFloatSpan params, const Batch& batch,
                                               FloatSpan grad, bool last = true) = 0;
  // grad += the sum over the region (over this worker alone when not connected) of the
  // gradients accumulated since the last call; the backend's own accumulator is then zero.
  virtual void reduce_gradient(FloatSpan grad) = 0;
  // reduce_gradient's reduce-scatter (ZeRO stage 2; connect_region with reduce_scatter): grad's
  // range of this worker (Communicator::reduce_scatter_sum's `counts`) += the region's sum of it;
  // the rest of grad is unspecified. InputError on a backend that does not shard (the device's).
  virtual void reduce_scatter_gradient(FloatSpan grad, std::span<const uint64_t> counts) {
    (void)grad;
    (void)counts;
    GT_REQUIRE(false,
               "this worker's device does not reduce-scatter its gradient (ZeRO stage 2 "
               "is CPU-only)");
  }
  // Forward only; params and the batch are host memory.
  virtual models::BatchResult evaluate(ConstFloatSpan params, const models::BatchView& batch) = 0;
};

// The model's view of a loader batch (borrows it).
inline models::BatchView view_of(const Batch& b) {
  return {b.size, b.x.empty() ? nullptr : b.x.data(), b.y.empty() ? nullptr : b.y.data(),
          b.tokens.empty() ? nullptr : b.tokens.data()};
}

class CpuModelBackend final : public ModelBackend {
 public:
  explicit CpuModelBackend(std::unique_ptr<models::Model> model) : model_(std::move(model)) {}
  std::unique_ptr<Communicator> connect_region(gloo::rendezvous::Store& store, int rank, int size,
                                               const RegionOptions& options) override;
  bool can_reconnect_region() const override { return true; }
  void disconnect_region() override;
  ~CpuModelBackend() override;
  models::BatchResult forward_backward(ConstFloatSpan params, const Batch& batch, FloatSpan grad,
                                       bool last = true) override;
  void reduce_gradient(FloatSpan grad) override;  // in place: grad already holds the accumulation
  void reduce_scatter_gradient(FloatSpan grad, std::span<const uint64_t> counts) override;
  models::BatchResult evaluate(ConstFloatSpan params, const models::BatchView& batch) override;

 private:
  std::unique_ptr<models::Model> model_;
  Communicator* region_ = nullptr;  // borrowed: connect_region's result, owned by the caller
  std::unique_ptr<BucketedAllReduce> buckets_;  // when bucket_cap_mb > 0; uses *region_
};

}  // namespace geotrain::worker
