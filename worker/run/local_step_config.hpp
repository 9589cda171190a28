// How a worker of a config trains between exchanges: the local step's optimizer, schedule,
// accumulation, clipping and anomaly guard (worker/training/local_step.hpp) from the worker's
// config, the model's table and the fleet's size. Used by the trainer and by the PyTorch parity
// tests, so that both step exactly as the config says.
#pragma once

#include <cstdint>

#include "core/param_table.hpp"
#include "models/model.hpp"
#include "worker/config.hpp"
#include "worker/training/local_step.hpp"

namespace geotrain::worker {

// The local optimizer and its schedule as a worker of `config` runs them (world: the workers of
// all regions, for worker.lr_scaling).
LocalStepConfig local_step_config(const WorkerConfig& config, const ParamTable& table,
                                  const models::Model& model, uint32_t world);

}  // namespace geotrain::worker
