#include "worker/run/local_step_config.hpp"

namespace geotrain::worker {

LocalStepConfig local_step_config(const WorkerConfig& c, const ParamTable& table,
                                  const models::Model& model, uint32_t world) {
  LocalStepConfig lsc;
  lsc.optimizer = c.optimizer;
  lsc.schedule.base_lr = c.lr;
  lsc.schedule.warmup_steps = c.warmup_steps;
  lsc.schedule.total_steps = c.total_steps();
  lsc.schedule.decay = c.decay;
  lsc.schedule.min_lr = c.min_lr;
  lsc.schedule.cycle_steps = c.lr_cycle_steps;
  lsc.schedule.cycle_mult = c.lr_cycle_mult;
  if (c.lr_scaling) {
    lsc.schedule.scaling = *c.lr_scaling;
    lsc.schedule.reference_batch = c.lr_reference_batch;
    lsc.schedule.global_batch = static_cast<uint32_t>(
        (c.batch_size.uneven() ? c.batch_size.global(c.workers)
                               : uint64_t{c.batch_size.of_rank(c.workers, 0)} * world) *
        c.accumulation_steps);
  }
  lsc.schedule.validate();
  lsc.accumulation_steps = c.accumulation_steps;
  lsc.max_grad_norm = c.max_grad_norm;
  lsc.guard = c.guard;
  lsc.decay_mask = weight_decay_mask(table, c.optimizer.no_decay);
  if (c.optimizer.kind == OptimizerKind::kMuon)
    lsc.muon_matrices = muon_matrices(table, model.tensor_shapes(), c.optimizer.adamw_tensors);
  return lsc;
}

}  // namespace geotrain::worker
