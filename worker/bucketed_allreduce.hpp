// BucketedAllReduce: gradient AllReduce in buckets of about bucket_cap_mb, PyTorch-DDP style.
//
// Owns: the bucket plan over a ParamTable layout. Buckets are contiguous ranges of the flat
// gradient made of whole tensors, filled in reverse tensor order (backward produces the last
// layer's gradients first) and closed once they reach the cap (a tensor larger than the cap gets
// a bucket of its own). tensor_ready(i) marks tensor i's gradient final; when that completes a
// bucket, the bucket is reduced at once, so communication can start before backward ends.
// finish() reduces whatever is left and re-arms for the next step. Collective: every rank must
// mark the same tensors in the same order (true of a deterministic backward). Borrows comm.
// Blocking (each reduction runs in the calling thread; TODO(perf): a communication thread so
// a bucket's reduce overlaps the next layer's backward). Not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "core/param_table.hpp"
#include "core/span.hpp"
#include "worker/communicator.hpp"

namespace geotrain::worker {

struct Bucket {
  uint64_t offset = 0, size = 0;  // elements of the flat buffer
  std::vector<size_t> tensors;    // indices into the layout
};

class BucketedAllReduce {
 public:
  // InputError when bucket_cap_mb <= 0.
  BucketedAllReduce(Communicator& comm, const std::vector<TensorInfo>& layout, double bucket_cap_mb);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Tensor `index` of `grad` is final for this step; reduces its bucket when that completes it.
  void tensor_ready(size_t index, FloatSpan grad);
  // Reduces every bucket not reduced yet; afterwards grad holds the sum over ranks.
  void finish(FloatSpan grad);
  uint64_t reductions() const { return reductions_; }

 private:
  void reduce(size_t bucket, FloatSpan grad);

  Communicator& comm_;
  uint64_t total_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;     // tensor index -> bucket
  std::vector<size_t> pending_;       // per bucket: tensors not yet ready
  std::vector<bool> tensor_ready_;
  std::vector<bool> reduced_;
  uint64_t reductions_ = 0;
};

}  // namespace geotrain::worker
