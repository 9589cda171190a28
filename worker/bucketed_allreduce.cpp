#include "worker/bucketed_allreduce.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace geotrain::worker {

BucketedAllReduce::BucketedAllReduce(Communicator& comm, const std::vector<TensorInfo>& layout,
                                     double bucket_cap_mb)
    : comm_(comm) {
  GT_REQUIRE(bucket_cap_mb > 0, "bucket_cap_mb {} must be > 0", bucket_cap_mb);
  const auto cap = static_cast<uint64_t>(std::max(1.0, bucket_cap_mb * 1024 * 1024 / sizeof(float)));
  bucket_of_.resize(layout.size());
  for (size_t k = layout.size(); k-- > 0;) {
    const TensorInfo& t = layout[k];
    GT_ASSERT(k + 1 == layout.size() || t.offset + t.size == layout[k + 1].offset,
              "layout is not contiguous at tensor {}", t.name);
    if (buckets_.empty() || buckets_.back().size >= cap) buckets_.push_back({t.offset + t.size, 0, {}});
    Bucket& b = buckets_.back();
    b.offset = t.offset;  // grows downwards: tensors are visited in reverse
    b.size += t.size;
    b.tensors.push_back(k);
    bucket_of_[k] = buckets_.size() - 1;
    total_ += t.size;
  }
  pending_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].tensors.size();
  tensor_ready_.assign(layout.size(), false);
  reduced_.assign(buckets_.size(), false);
}

void BucketedAllReduce::reduce(size_t bucket, FloatSpan grad) {
  const Bucket& b = buckets_[bucket];
  comm_.allreduce_sum(grad.subspan(b.offset, b.size));
  reduced_[bucket] = true;
  ++reductions_;
}

void BucketedAllReduce::tensor_ready(size_t index, FloatSpan grad) {
  GT_REQUIRE(grad.size() == total_, "bucketed allreduce: gradient has {} elements, layout {}",
             grad.size(), total_);
  GT_REQUIRE(index < tensor_ready_.size(), "bucketed allreduce: tensor {} of {}", index,
             tensor_ready_.size());
  GT_ASSERT(!tensor_ready_[index], "tensor {} marked ready twice in one step", index);
  tensor_ready_[index] = true;
  const size_t b = bucket_of_[index];
  if (--pending_[b] == 0) reduce(b, grad);
}

void BucketedAllReduce::finish(FloatSpan grad) {
  GT_REQUIRE(grad.size() == total_, "bucketed allreduce: gradient has {} elements, layout {}",
             grad.size(), total_);
  // Same order on every rank (bucket index order), whatever each rank marked ready.
  for (size_t b = 0; b < buckets_.size(); ++b)
    if (!reduced_[b]) reduce(b, grad);
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].tensors.size();
  std::fill(tensor_ready_.begin(), tensor_ready_.end(), false);
  std::fill(reduced_.begin(), reduced_.end(), false);
}

}  // namespace geotrain::worker
