// BucketedAllReduce: gradient AllReduce in buckets of about bucket_cap_mb, PyTorch-DDP style.
//
// Owns: the bucket plan over a ParamTable layout. Buckets are contiguous ranges of the flat
// gradient made of whole tensors, filled in reverse tensor order (backward produces the last
// layer's gradients first) and closed once they reach the cap (a tensor larger than the cap gets
// a bucket of its own). tensor_ready(i) marks tensor i's gradient final; when that completes a
// bucket, the bucket is reduced at once, so communication can start before backward ends.
// finish() reduces whatever is left and re-arms for the next step. Collective: every rank must
// mark the same tensors in the same order (true of a deterministic backward). Borrows comm.
// With `background` (the trainer's choice), reductions run on a communication thread owned
// here, in the order buckets complete, so a bucket's AllReduce overlaps the backward of the
// layers below it; tensor_ready() only queues, finish() waits for them all. The communicator is
// then used by that thread between the first tensor_ready() and finish(), and by the caller
// only outside that window. Without `background`, each reduction runs in the calling thread.
// Not thread-safe: one caller thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/param_table.hpp"
#include "core/span.hpp"
#include "worker/region/communicator.hpp"

namespace geotrain::worker {

struct Bucket {
  uint64_t offset = 0, size = 0;  // elements of the flat buffer
  std::vector<size_t> tensors;    // indices into the layout
};

class BucketedAllReduce {
 public:
  // InputError when bucket_cap_mb <= 0.
  BucketedAllReduce(Communicator& comm, const std::vector<TensorInfo>& layout, double bucket_cap_mb,
                    bool background = false);
  ~BucketedAllReduce();
  BucketedAllReduce(const BucketedAllReduce&) = delete;
  BucketedAllReduce& operator=(const BucketedAllReduce&) = delete;

  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Tensor `index` of `grad` is final for this step; reduces its bucket when that completes it.
  void tensor_ready(size_t index, FloatSpan grad);
  // Reduces every bucket not reduced yet; afterwards grad holds the sum over ranks.
  void finish(FloatSpan grad);
  uint64_t reductions() const { return reductions_; }

 private:
  void reduce(size_t bucket, FloatSpan grad);
  void drain();  // waits until the queue is empty and idle

  Communicator& comm_;
  uint64_t total_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // tensor index -> bucket
  std::vector<size_t> pending_;    // per bucket: tensors not yet ready
  std::vector<bool> tensor_ready_;
  std::vector<bool> reduced_;
  uint64_t reductions_ = 0;

  // Background mode: a FIFO of buckets to reduce, served by thread_.
  struct Job {
    size_t bucket;
    FloatSpan grad;
  };
  bool background_ = false;
  std::mutex mutex_;
  std::condition_variable work_, idle_;
  std::deque<Job> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace geotrain::worker
