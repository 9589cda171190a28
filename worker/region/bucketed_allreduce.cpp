#include "worker/region/bucketed_allreduce.hpp"

#include <algorithm>
#include <utility>

#include "core/error.hpp"

namespace geotrain::worker {

BucketedAllReduce::BucketedAllReduce(Communicator& comm, const std::vector<TensorInfo>& layout,
                                     double bucket_cap_mb, bool background)
    : comm_(comm), background_(background) {
  GT_REQUIRE(bucket_cap_mb > 0, "bucket_cap_mb {} must be > 0", bucket_cap_mb);
  const auto cap =
      static_cast<uint64_t>(std::max(1.0, bucket_cap_mb * 1024 * 1024 / sizeof(float)));
  bucket_of_.resize(layout.size());
  for (size_t k = layout.size(); k-- > 0;) {
    const TensorInfo& t = layout[k];
    GT_ASSERT(k + 1 == layout.size() || t.offset + t.size == layout[k + 1].offset,
              "layout is not contiguous at tensor {}", t.name);
    if (buckets_.empty() || buckets_.back().size >= cap)
      buckets_.push_back({t.offset + t.size, 0, {}});
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
  if (!background_) return;
  thread_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    for (;;) {
      work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      const Job job = queue_.front();
      queue_.pop_front();
      // After a failure the communicator is broken (a member died): the buckets still queued are
      // not tried, so that finish() reports it at once.
      if (error_) {
        if (queue_.empty()) idle_.notify_all();
        continue;
      }
      busy_ = true;
      lock.unlock();
      try {
        const Bucket& b = buckets_[job.bucket];
        comm_.allreduce_sum(job.grad.subspan(b.offset, b.size));
      } catch (...) {
        lock.lock();
        if (!error_) error_ = std::current_exception();
        lock.unlock();
      }
      lock.lock();
      busy_ = false;
      if (queue_.empty()) idle_.notify_all();
    }
  });
}

BucketedAllReduce::~BucketedAllReduce() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  thread_.join();
}

void BucketedAllReduce::reduce(size_t bucket, FloatSpan grad) {
  reduced_[bucket] = true;
  ++reductions_;
  if (!background_) {
    const Bucket& b = buckets_[bucket];
    comm_.allreduce_sum(grad.subspan(b.offset, b.size));
    return;
  }
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({bucket, grad});
  }
  work_.notify_one();
}

void BucketedAllReduce::drain() {
  if (!background_) return;
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
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
  drain();
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].tensors.size();
  std::fill(tensor_ready_.begin(), tensor_ready_.end(), false);
  std::fill(reduced_.begin(), reduced_.end(), false);
}

}  // namespace geotrain::worker
