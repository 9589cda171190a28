// StepEngine: where one worker's local steps run; the trainer's loop (worker/run/trainer.cpp) calls
// it the same way whatever the device. Two implementations (make_step_engine picks by the
// backend):
//  - host: forward/backward into LocalStep's host gradient, the region's AllReduce, the
//    optimizer (LocalStep) on the host parameters; with ZeRO, the optimizer on this worker's
//    range, a reduce-scatter for the AllReduce at stage 2, and the parameters' allgather;
//  - device-resident (ModelBackend::resident(), `worker.device: cuda`): parameters, gradient
//    and optimizer state stay on the device; LocalStep only decides (guard, clipping,
//    schedule) and the device applies. The host parameters are then a mirror: to_host() before
//    they are read (exchanges, evaluations), to_device() after they are written (a broadcast, a
//    merge, a resume). Both are no-ops on the host. A snapshot's copy comes straight from the
//    device (capture()).
// Borrows the backend and the LocalStep, which must outlive it. Not thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/span.hpp"
#include "worker/backend/model_backend.hpp"
#include "worker/region/communicator.hpp"
#include "worker/training/local_step.hpp"
#include "worker/training/zero_shards.hpp"

namespace geotrain::worker {

struct WorkerCheckpointState;

class StepEngine {
 public:
  virtual ~StepEngine() = default;
  // One micro-batch's forward and backward at `params` (host values; the device's own when
  // resident), accumulating the gradient of its mean loss. `last`: the step's last micro-batch.
  virtual models::BatchResult accumulate(ConstFloatSpan params, const Batch& batch, bool last) = 0;
  // The region's sum of the accumulated gradients (AllReduce when connected).
  virtual void reduce_gradient() = 0;
  // The local optimizer step on the reduced gradient, summed over `reduced_over` workers.
  virtual StepReport apply(FloatSpan params, uint32_t reduced_over) = 0;

  // The host mirror (no-ops on the host).
  virtual void to_host(FloatSpan params) { (void)params; }
  virtual void to_device(ConstFloatSpan params) { (void)params; }
  // A snapshot's own copy of the parameters and the optimizer's moments as they are now, into
  // `state` (params, optimizer_m, optimizer_v; sized here): from `params` and LocalStep's
  // optimizer on the host; from the device, straight into `state`, when resident (the host
  // mirror and LocalStep's moments are left as they are).
  virtual void capture(ConstFloatSpan params, WorkerCheckpointState& state) = 0;
  // LocalStep's optimizer state (restored from a snapshot) onto the device.
  virtual void optimizer_to_device() {}
};

// ZeRO inside a region (worker/training/zero_shards.hpp), host engine only: the ranges, which
// `step` was built for (LocalStepConfig::shard_begin/end, gradient_sharded), and the region's
// communicator now (null: a region of one worker).
struct ZeroRegion {
  ZeroShards shards;
  std::function<Communicator*()> comm;
};

// The host engine, or the device-resident one when backend.resident() is not null (whose
// optimizer state it allocates for `optimizer`; decay_mask as LocalStepConfig's). A sharded
// `zero` makes the host engine's reduction a reduce-scatter (stage 2) and follows each step with
// the parameters' allgather; InputError with a device-resident backend.
std::unique_ptr<StepEngine> make_step_engine(ModelBackend& backend, LocalStep& step,
                                             const OptimizerConfig& optimizer,
                                             const std::vector<uint8_t>& decay_mask,
                                             ZeroRegion zero = {});

}  // namespace geotrain::worker
