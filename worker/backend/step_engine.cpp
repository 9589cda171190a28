#include "worker/backend/step_engine.hpp"

#include <cstring>

#include "core/error.hpp"
#include "worker/run/worker_checkpoint.hpp"

namespace geotrain::worker {
namespace {

class HostStepEngine final : public StepEngine {
 public:
  HostStepEngine(ModelBackend& backend, LocalStep& step, ZeroRegion zero)
      : backend_(backend), step_(step), zero_(std::move(zero)) {}

  models::BatchResult accumulate(ConstFloatSpan params, const Batch& batch, bool last) override {
    return backend_.forward_backward(params, batch, step_.grad(), last);
  }
  void reduce_gradient() override {
    Communicator* comm = region();
    if (comm != nullptr && zero_.shards.stage == 2)
      backend_.reduce_scatter_gradient(step_.grad(), zero_.shards.counts);
    else
      backend_.reduce_gradient(step_.grad());
  }
  StepReport apply(FloatSpan params, uint32_t reduced_over) override {
    Communicator* comm = region();
    if (comm == nullptr) return step_.apply(params, reduced_over);
    const StepReport report = step_.apply(
        params, reduced_over, [comm](double partial) { return sum_over_region(*comm, partial); });
    // Every worker stepped its own range (or, refused, none): each takes the others'.
    comm->allgather(params, zero_.shards.counts);
    return report;
  }
  void capture(ConstFloatSpan params, WorkerCheckpointState& state) override {
    const auto& opt = step_.optimizer();
    state.params.assign(params.begin(), params.end());
    state.optimizer_m.assign(opt.first_moment().begin(), opt.first_moment().end());
    state.optimizer_v.assign(opt.second_moment().begin(), opt.second_moment().end());
  }

 private:
  // The region's communicator when the optimizer is sharded over it.
  Communicator* region() const {
    return zero_.shards.sharded() && zero_.comm ? zero_.comm() : nullptr;
  }
  // Every worker's `partial`, summed in rank order: the same bits on every worker. The doubles
  // travel as the bit patterns of two floats each through an allgather, which only copies.
  static double sum_over_region(Communicator& comm, double partial) {
    const auto k = static_cast<size_t>(comm.size());
    std::vector<float> slots(2 * k);
    std::memcpy(&slots[2 * static_cast<size_t>(comm.rank())], &partial, sizeof partial);
    comm.allgather(slots, std::vector<uint64_t>(k, 2));
    double total = 0;
    for (size_t r = 0; r < k; ++r) {
      double x = 0;
      std::memcpy(&x, &slots[2 * r], sizeof x);
      total += x;
    }
    return total;
  }

  ModelBackend& backend_;
  LocalStep& step_;
  ZeroRegion zero_;
};

class ResidentStepEngine final : public StepEngine {
 public:
  ResidentStepEngine(ResidentTraining& device, LocalStep& step, const OptimizerConfig& optimizer,
                     const std::vector<uint8_t>& decay_mask)
      : device_(device), step_(step) {
    device_.prepare_optimizer(optimizer, decay_mask);
  }

  models::BatchResult accumulate(ConstFloatSpan, const Batch& batch, bool last) override {
    return device_.accumulate(batch, last);
  }
  void reduce_gradient() override { grad_norm_sq_ = device_.reduce_gradient_norm_sq(); }
  StepReport apply(FloatSpan, uint32_t reduced_over) override {
    float grad_scale = 0;
    const StepReport report = step_.decide(grad_norm_sq_, reduced_over, &grad_scale);
    device_.apply_step(
        {report.verdict == Verdict::kAccept, report.lr, grad_scale, step_.optimizer().steps()});
    return report;
  }

  void to_host(FloatSpan params) override { device_.download_parameters(params); }
  void to_device(ConstFloatSpan params) override { device_.upload_parameters(params); }
  void capture(ConstFloatSpan params, WorkerCheckpointState& state) override {
    const auto& opt = step_.optimizer();
    state.params.resize(params.size());
    state.optimizer_m.resize(opt.first_moment().size());
    state.optimizer_v.resize(opt.second_moment().size());
    device_.download_parameters(state.params);
    device_.download_optimizer_state(state.optimizer_m, state.optimizer_v);
  }
  void optimizer_to_device() override {
    device_.upload_optimizer_state(step_.optimizer().first_moment(),
                                   step_.optimizer().second_moment());
  }

 private:
  ResidentTraining& device_;
  LocalStep& step_;
  double grad_norm_sq_ = 0;  // of the region's summed gradient, from reduce_gradient()
};

}  // namespace

std::unique_ptr<StepEngine> make_step_engine(ModelBackend& backend, LocalStep& step,
                                             const OptimizerConfig& optimizer,
                                             const std::vector<uint8_t>& decay_mask,
                                             ZeroRegion zero) {
  if (auto* device = backend.resident()) {
    GT_REQUIRE(zero.shards.stage == 0,
               "worker.zero_stage {}: the optimizer state is sharded on the CPU only (a "
               "device-resident worker keeps all of it)",
               zero.shards.stage);
    return std::make_unique<ResidentStepEngine>(*device, step, optimizer, decay_mask);
  }
  return std::make_unique<HostStepEngine>(backend, step, std::move(zero));
}

}  // namespace geotrain::worker
