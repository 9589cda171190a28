#include "worker/backend/backend_factory.hpp"

#include "core/error.hpp"

#ifdef GEOTRAIN_WORKER_HAS_CUDA
#include "worker/backend/cuda_model_backend.hpp"
#endif

namespace geotrain::worker {

void require_device_available(const std::string& device) {
  if (device == "cpu") return;
  GT_REQUIRE(device == "cuda", "worker.device is '{}': allowed values are cpu and cuda", device);
#ifdef GEOTRAIN_WORKER_HAS_CUDA
  std::string why;
  GT_REQUIRE(
      cuda_device_count(&why) > 0,
      "worker.device is 'cuda' but this machine has no usable CUDA device ({}); use device: cpu",
      why);
#else
  GT_REQUIRE(false,
             "worker.device is 'cuda' but this geotrain was built without CUDA and NCCL (nvcc or "
             "NCCL was not "
             "found at configure time); rebuild with CUDA and NCCL, or use device: cpu");
#endif
}

std::unique_ptr<ModelBackend> make_model_backend(const std::string& device,
                                                 const models::ModelSpec& spec, int rank,
                                                 const std::string& precision) {
  GT_REQUIRE(precision == "fp32" || precision == "bf16",
             "worker.precision is '{}': allowed values are fp32 and bf16", precision);
  require_device_available(device);
  GT_REQUIRE(precision == "fp32" || (device == "cuda" && spec.kind == "gpt"),
             "worker.precision bf16 needs device: cuda and model.kind: gpt (device {}, model {} "
             "train in fp32)",
             device, spec.kind);
#ifdef GEOTRAIN_WORKER_HAS_CUDA
  if (device == "cuda") return make_cuda_model_backend(spec, rank, precision);
#endif
  (void)rank;
  return std::make_unique<CpuModelBackend>(models::make_model(spec));
}

}  // namespace geotrain::worker
