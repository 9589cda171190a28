// The CUDA model backend's entry points (CUDA + NCCL builds only: geotrain_worker_cuda). This
// header needs no CUDA headers, so host-only code (the trainer) can include it.
//
// The backend (cuda_model_backend.cpp) runs a models::DeviceModel (MlpCuda, or GptCuda in fp32
// or bf16) on device `rank % device_count`, and names no model kind. It owns device buffers for
// the parameters (fp32 master), the gradient accumulator and the optimizer state (the model
// owns its batch); its work runs on the model's stream.
// It trains device-resident (ModelBackend::resident(), docs/training.md "On a GPU"): the fused
// optimizer (kernels/optim_cuda.cuh) updates the parameters on the device, and in bf16 writes
// the GEMMs' bf16 weights in the same pass. The host-driven calls (forward_backward with host
// parameters, reduce_gradient to a host span) stay available, and evaluate() uploads the host
// parameters it is given. The region's gradient sum is an NCCL AllReduce in device memory;
// connect_region returns a Communicator over host spans that stages them through a device
// buffer for NCCL (the loss, the per-round parameter broadcast).
#pragma once

#include <memory>
#include <string>

#include "models/model_spec.hpp"
#include "worker/backend/model_backend.hpp"

namespace geotrain::worker {

// Visible CUDA devices; 0 when there are none, with the runtime's reason in *why (if non-null).
int cuda_device_count(std::string* why = nullptr);
// The device's name (cudaGetDeviceProperties), e.g. "NVIDIA H100 80GB HBM3".
std::string cuda_device_name(int device);

// InputError when no CUDA device is visible. Selects the device (cudaSetDevice) for this thread.
// precision: fp32 | bf16 (bf16 for a GPT only).
std::unique_ptr<ModelBackend> make_cuda_model_backend(const models::ModelSpec& spec, int rank,
                                                      const std::string& precision = "fp32");

}  // namespace geotrain::worker
