// LocalStep: one worker's local optimisation step, in the order the issue fixes:
//   accumulate micro-batch gradients -> (caller: AllReduce of grad()) -> average ->
//   anomaly guard -> global-norm clip -> optimizer step at the scheduled learning rate.
// (The guard looks at the unclipped gradient: clipping would turn an infinity into NaNs.)
//
// Owns: the flat gradient accumulator, the Optimizer, the AnomalyGuard. Usage per micro-batch:
// model.forward_backward(params, ..., step.grad()); if (step.add_micro_batch(mean_loss)) {
// allreduce_sum(step.grad()) (optional); auto r = step.apply(params, world); }. A refused step
// leaves the parameters and the optimizer state untouched, and still clears the accumulator and
// advances the schedule. Under ZeRO (LocalStepConfig::shard_begin/end) the Optimizer holds and
// steps one range of the parameters only; the caller allgathers the rest
// (worker/backend/step_engine.hpp). Nothing blocks (but a stage-2 apply() calls the region's
// collective through region_sum); not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/span.hpp"
#include "worker/training/anomaly_guard.hpp"
#include "worker/training/optimizer.hpp"
#include "worker/training/zero_shards.hpp"

namespace geotrain::worker {

struct LocalStepConfig {
  OptimizerConfig optimizer;
  LrSchedule schedule;
  uint32_t accumulation_steps = 1;  // micro-batches per optimizer step
  double max_grad_norm = 0;         // 0: no clipping
  AnomalyGuardConfig guard;
  // Muon (optimizer.kind muon): the matrices it orthogonalises (muon_matrices); they step at
  // optimizer.muon_lr * schedule.at(step) / schedule.base_lr.
  std::vector<MatrixBlock> muon_matrices{};
  std::vector<uint8_t> decay_mask;  // per parameter, 1 = weight decay applies; empty: all
  // ZeRO (worker/training/zero_shards.hpp): the range [shard_begin, shard_end) of the flat
  // parameters whose optimizer state this worker holds and steps; shard_end 0: all of them. A
  // Muon matrix lies wholly inside or outside it. gradient_sharded (stage 2): after the region's
  // reduction, grad() holds the region's sum in that range only.
  uint64_t shard_begin = 0, shard_end = 0;
  bool gradient_sharded = false;

  // The range and gradient_sharded of worker `rank` under `shards`.
  void take_range(const ZeroShards& shards, uint32_t rank) {
    shard_begin = shards.begin(rank);
    shard_end = shards.end(rank);
    gradient_sharded = shards.stage == 2 && shards.sharded();
  }
};

struct StepReport {
  uint64_t step = 0;  // index of the step just decided
  Verdict verdict = Verdict::kAccept;
  double loss = 0;       // mean over the accumulated micro-batches
  double grad_norm = 0;  // before clipping
  float lr = 0;
};

class LocalStep {
 public:
  LocalStep(const LocalStepConfig& config, size_t parameters);

  // Where backward accumulates (+=) the gradient; zero after construction and after apply().
  FloatSpan grad() { return grad_; }
  // Records one micro-batch's mean loss; true when accumulation_steps have been added.
  bool add_micro_batch(double mean_loss);
  // Replaces the mean loss of the micro-batches recorded so far (e.g. with the region's mean
  // after an AllReduce), so that every worker of a region takes the same guard decision.
  void set_loss(double mean_loss) { loss_sum_ = mean_loss * static_cast<double>(micro_); }
  // The sum over the region's workers of each one's partial squared gradient norm (stage 2: each
  // holds its range's), the same on every worker.
  using RegionSum = std::function<double(double)>;
  // Averages grad() over micro-batches and over `reduced_over` workers (grad() holds their sum
  // after an AllReduce; 1 without one), clips, asks the guard, steps the optimizer's range of
  // params. gradient_sharded: only the range's gradient is read; its squared norm, summed over
  // the region by `region_sum` (required), decides the guard and the clipping. InputError on a
  // size mismatch; GT_ASSERT when called before the micro-batches are complete.
  StepReport apply(FloatSpan params, uint32_t reduced_over = 1, const RegionSum& region_sum = {});
  // apply()'s decisions for a step whose gradient, parameters and optimizer state live on a
  // device (ModelBackend::resident()): from the region's summed gradient's squared norm, the
  // average, the guard's verdict, the clipping; counts the optimizer's step when accepted and
  // sets *grad_scale to what the device multiplies the summed gradient by (average x clip).
  // The accumulator here is not used. Same preconditions as apply().
  StepReport decide(double grad_sum_norm_sq, uint32_t reduced_over, float* grad_scale);

  uint64_t steps() const { return step_; }
  uint64_t skipped() const { return guard_.skipped(); }
  // Forgets the micro-batches recorded since the last step (their gradient and losses): a step
  // abandoned when the region's group broke during it (worker/region/region_group.hpp).
  void discard_accumulated();

  // Restoring from a worker checkpoint: the optimizer's and the guard's state, and the step the
  // schedule is at (the steps done so far).
  Optimizer& optimizer() { return optimizer_; }
  const Optimizer& optimizer() const { return optimizer_; }
  AnomalyGuard& guard() { return guard_; }
  const AnomalyGuard& guard() const { return guard_; }
  void set_steps(uint64_t steps) { step_ = steps; }
  // The learning-rate schedule's position for the next steps, when it is not the steps done
  // (time-budgeted rounds: every region at the same place of the schedule in the same round,
  // whatever its step count; worker/training/round_budget.hpp). nullopt: the steps done.
  void set_schedule_position(std::optional<uint64_t> step) { schedule_at_ = step; }

 private:
  // The step's report as far as apply() and decide() agree: step, mean loss, lr.
  StepReport begin_report(uint32_t reduced_over) const;
  // apply()'s guard and clipping on the averaged gradient: sets verdict and grad_norm.
  void judge(StepReport& r, uint32_t reduced_over, const RegionSum& region_sum);
  // The optimizer's range of a flat buffer.
  template <typename Span>
  Span range(Span all) const {
    return all.subspan(shard_begin_, shard_end_ - shard_begin_);
  }

  LocalStepConfig config_;
  uint64_t shard_begin_ = 0, shard_end_ = 0;
  Optimizer optimizer_;
  AnomalyGuard guard_;
  std::vector<float> grad_;
  uint32_t micro_ = 0;
  double loss_sum_ = 0;
  uint64_t step_ = 0;
  std::optional<uint64_t> schedule_at_;
};

}  // namespace geotrain::worker
