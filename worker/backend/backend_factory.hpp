// The backend for worker.device: the one place that knows every ModelBackend (the CPU one,
// worker/backend/model_backend.hpp, and, in CUDA + NCCL builds,
// worker/backend/cuda_model_backend.hpp), so that a backend's own file knows none of the others.
#pragma once

#include <memory>
#include <string>

#include "models/model_spec.hpp"
#include "worker/backend/model_backend.hpp"

namespace geotrain::worker {

// InputError unless this build and machine can train on `device` ("cpu" always can; "cuda"
// needs a CUDA + NCCL build and a visible device). The message names worker.device and what
// is missing.
void require_device_available(const std::string& device);

// The backend for worker.device (after require_device_available). `rank` is the worker's rank
// in its region; the CUDA backend trains on device rank % device_count.
// `precision` (fp32 | bf16): the GPT's on cuda; the CPU and the MLP train in fp32 (InputError
// for bf16 there, naming worker.precision).
std::unique_ptr<ModelBackend> make_model_backend(const std::string& device,
                                                 const models::ModelSpec& spec, int rank,
                                                 const std::string& precision = "fp32");

}  // namespace geotrain::worker
