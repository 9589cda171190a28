#include "worker/backend/model_backend.hpp"

#include "core/error.hpp"
#include "worker/region/gloo_communicator.hpp"

namespace geotrain::worker {

std::unique_ptr<Communicator> CpuModelBackend::connect_region(gloo::rendezvous::Store& store,
                                                              int rank, int size,
                                                              const RegionOptions& options) {
  auto comm = std::make_unique<GlooCommunicator>(store, rank, size,
                                                 GlooOptions{options.gloo_host, options.timeout});
  region_ = comm.get();
  if (options.bucket_cap_mb > 0 && !options.reduce_scatter)
    buckets_ = std::make_unique<BucketedAllReduce>(*region_, model_->make_table().tensors(),
                                                   options.bucket_cap_mb,
                                                   /*background=*/true);
  return comm;
}

void CpuModelBackend::disconnect_region() {
  buckets_.reset();  // joins its communication thread, which uses *region_
  region_ = nullptr;
}

CpuModelBackend::~CpuModelBackend() = default;

models::BatchResult CpuModelBackend::forward_backward(ConstFloatSpan params, const Batch& batch,
                                                      FloatSpan grad, bool last) {
  models::Model::TensorReady ready;
  if (buckets_ && last) ready = [&](size_t tensor) { buckets_->tensor_ready(tensor, grad); };
  return model_->forward_backward(params, view_of(batch), grad, ready);
}

void CpuModelBackend::reduce_gradient(FloatSpan grad) {
  if (region_ == nullptr) return;
  if (buckets_)
    buckets_->finish(grad);  // waits for the buckets still in flight
  else
    region_->allreduce_sum(grad);
}

void CpuModelBackend::reduce_scatter_gradient(FloatSpan grad, std::span<const uint64_t> counts) {
  if (region_ == nullptr) return;
  GT_ASSERT(buckets_ == nullptr, "a reduce-scatter after bucketed AllReduces");
  region_->reduce_scatter_sum(grad, counts);
}

models::BatchResult CpuModelBackend::evaluate(ConstFloatSpan params,
                                              const models::BatchView& batch) {
  return model_->evaluate(params, batch);
}

}  // namespace geotrain::worker
