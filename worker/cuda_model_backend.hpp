// The CUDA model backend's entry points (CUDA + NCCL builds only: geotrain_worker_cuda). This
// header needs no CUDA headers, so host-only code (the trainer) can include it.
//
// CudaModelBackend (in cuda_model_backend.cpp) is a ModelBackend over models::MlpCuda on device
// `rank % device_count`. It owns device buffers for the parameters, the gradient accumulator
// (parameter_count each) and the batch; everything it does runs on the MlpCuda's stream and
// blocks until done. Parameters are uploaded from the host for each call (the optimizer runs on
// the host); the gradient accumulates on the device, is summed over the region by
// NcclCommunicator in device memory, and is copied to the host once per reduce_gradient.
// connect_region returns a Communicator over host spans that stages them through a device
// buffer for NCCL (used for the loss and the per-round parameter broadcast).
#pragma once

#include <memory>
#include <string>

#include "models/mlp.hpp"
#include "worker/model_backend.hpp"

namespace geotrain::worker {

// Visible CUDA devices; 0 when there are none, with the runtime's reason in *why (if non-null).
int cuda_device_count(std::string* why = nullptr);

// InputError when no CUDA device is visible. Selects the device (cudaSetDevice) for this thread.
std::unique_ptr<ModelBackend> make_cuda_model_backend(const models::MlpConfig& config, int rank);

}  // namespace geotrain::worker
