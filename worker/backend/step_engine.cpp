#include "worker/backend/step_engine.hpp"

#include "worker/run/worker_checkpoint.hpp"

namespace geotrain::worker {
namespace {

class HostStepEngine final : public StepEngine {
 public:
  HostStepEngine(ModelBackend& backend, LocalStep& step) : backend_(backend), step_(step) {}

  models::BatchResult accumulate(ConstFloatSpan params, const Batch& batch, bool last) override {
    return backend_.forward_backward(params, batch, step_.grad(), last);
  }
  void reduce_gradient() override { backend_.reduce_gradient(step_.grad()); }
  StepReport apply(FloatSpan params, uint32_t reduced_over) override {
    return step_.apply(params, reduced_over);
  }
  void capture(ConstFloatSpan params, WorkerCheckpointState& state) override {
    const auto& opt = step_.optimizer();
    state.params.assign(params.begin(), params.end());
    state.optimizer_m.assign(opt.first_moment().begin(), opt.first_moment().end());
    state.optimizer_v.assign(opt.second_moment().begin(), opt.second_moment().end());
  }

 private:
  ModelBackend& backend_;
  LocalStep& step_;
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
                                             const std::vector<uint8_t>& decay_mask) {
  if (auto* device = backend.resident())
    return std::make_unique<ResidentStepEngine>(*device, step, optimizer, decay_mask);
  return std::make_unique<HostStepEngine>(backend, step);
}

}  // namespace geotrain::worker
