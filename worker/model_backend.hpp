// ModelBackend: where a worker's forward and backward run (worker.device: cpu | cuda), and the
// region connection that matches that memory (Gloo on host buffers, NCCL on device buffers).
//
// The trainer's view stays in host memory: parameters, the optimizer and the LocalStep
// gradient accumulator are host spans. A backend may keep its own copies elsewhere:
//   - CpuModelBackend: any models::Model (the MLP, the GPT), works in place on the host spans;
//     the region is Gloo.
//   - CudaModelBackend (worker/cuda_model_backend.hpp, CUDA + NCCL builds): models::MlpCuda with
//     device buffers for parameters, the gradient accumulator and the batch; the gradient stays
//     on the device through the NCCL AllReduce and comes to the host once per step. MLP only
//     for now: a GPT on CUDA is refused with a message saying so.
// Usage per optimizer step: forward_backward(params, batch, grad) for each micro-batch, then
// reduce_gradient(grad), then read grad (the region's sum) and step the host optimizer.
// Calls block; not thread-safe (one trainer thread). Spans are borrowed for the call.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "core/span.hpp"
#include "models/model.hpp"
#include "models/model_spec.hpp"
#include "worker/batch_loader.hpp"
#include "worker/bucketed_allreduce.hpp"
#include "worker/communicator.hpp"

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
};

class ModelBackend {
 public:
  virtual ~ModelBackend() = default;

  // Joins the region's `size` workers (rendezvous through `store`, which must outlive the call)
  // and returns a Communicator over HOST spans for the trainer's own collectives (the loss, the
  // parameter broadcast). The backend keeps using the same connection in reduce_gradient; the
  // returned Communicator must not outlive the backend. Not called for a region of one worker.
  virtual std::unique_ptr<Communicator> connect_region(gloo::rendezvous::Store& store, int rank,
                                                       int size, const RegionOptions& options) = 0;
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
  ~CpuModelBackend() override;
  models::BatchResult forward_backward(ConstFloatSpan params, const Batch& batch, FloatSpan grad,
                                       bool last = true) override;
  void reduce_gradient(FloatSpan grad) override;  // in place: grad already holds the accumulation
  models::BatchResult evaluate(ConstFloatSpan params, const models::BatchView& batch) override;

 private:
  std::unique_ptr<models::Model> model_;
  Communicator* region_ = nullptr;  // borrowed: connect_region's result, owned by the caller
  std::unique_ptr<BucketedAllReduce> buckets_;  // when bucket_cap_mb > 0; uses *region_
};

// InputError unless this build and machine can train on `device` ("cpu" always can; "cuda"
// needs a CUDA + NCCL build and a visible device). The message names worker.device and what
// is missing.
void require_device_available(const std::string& device);

// The backend for worker.device (after require_device_available). `rank` is the worker's rank
// in its region; the CUDA backend trains on device rank % device_count.
// InputError for a model the device cannot train yet (a GPT on cuda).
std::unique_ptr<ModelBackend> make_model_backend(const std::string& device,
                                                 const models::ModelSpec& spec, int rank);

}  // namespace geotrain::worker
