#include "worker/model_backend.hpp"

#include "core/error.hpp"
#include "worker/gloo_communicator.hpp"

#ifdef GEOTRAIN_WORKER_HAS_CUDA
#include "worker/cuda_model_backend.hpp"
#endif

namespace geotrain::worker {

std::unique_ptr<Communicator> CpuModelBackend::connect_region(gloo::rendezvous::Store& store,
                                                              int rank, int size,
                                                              const RegionOptions& options) {
  auto comm = std::make_unique<GlooCommunicator>(store, rank, size,
                                                 GlooOptions{options.gloo_host, options.timeout});
  region_ = comm.get();
  return comm;
}

models::BatchResult CpuModelBackend::forward_backward(ConstFloatSpan params, const Batch& batch,
                                                      FloatSpan grad) {
  return model_.forward_backward(params, batch.x.data(), batch.y.data(), batch.size, grad);
}

void CpuModelBackend::reduce_gradient(FloatSpan grad) {
  if (region_ != nullptr) region_->allreduce_sum(grad);
}

models::BatchResult CpuModelBackend::evaluate(ConstFloatSpan params, const float* x,
                                              const int32_t* labels, size_t n) {
  return model_.evaluate(params, x, labels, n);
}

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
                                                 const models::MlpConfig& config, int rank) {
  require_device_available(device);
#ifdef GEOTRAIN_WORKER_HAS_CUDA
  if (device == "cuda") return make_cuda_model_backend(config, rank);
#else
  (void)rank;
#endif
  return std::make_unique<CpuModelBackend>(config);
}

}  // namespace geotrain::worker
