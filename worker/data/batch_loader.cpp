#include "worker/data/batch_loader.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace geotrain::worker {

BatchLoader::BatchLoader(const Dataset& data, const DistributedSampler& sampler,
                         const LoaderOptions& options)
    : data_(data), sampler_(sampler), options_(options) {
  GT_REQUIRE(options.batch_size > 0, "loader: batch_size is 0");
  GT_REQUIRE(options.prefetch > 0, "loader: prefetch is 0");
  thread_ = std::thread([this] { produce(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  space_.notify_all();
  thread_.join();
}

uint64_t BatchLoader::batches_per_epoch() const {
  const uint64_t n = sampler_.samples_per_rank();
  return options_.drop_last_batch ? n / options_.batch_size
                                  : (n + options_.batch_size - 1) / options_.batch_size;
}

void BatchLoader::produce() {
  try {
    const size_t d = data_.features;
    for (uint64_t e = options_.first_epoch; e < options_.first_epoch + options_.epochs; ++e) {
      const std::vector<uint64_t> idx = sampler_.indices(e);
      const uint64_t batches = batches_per_epoch();
      for (uint64_t b = 0; b < batches; ++b) {
        Batch batch;
        batch.epoch = e;
        batch.index = b;
        const uint64_t begin = b * options_.batch_size;
        batch.size =
            static_cast<size_t>(std::min<uint64_t>(options_.batch_size, idx.size() - begin));
        batch.x.resize(batch.size * d);
        batch.y.resize(batch.size);
        for (size_t i = 0; i < batch.size; ++i) {
          const uint64_t s = idx[begin + i];
          GT_ASSERT(s < data_.count, "sample {} out of {}", s, data_.count);
          std::memcpy(batch.x.data() + i * d, data_.x.data() + s * d, d * sizeof(float));
          batch.y[i] = data_.y[s];
        }
        std::unique_lock lock(mu_);
        space_.wait(lock, [&] { return stop_ || queue_.size() < options_.prefetch; });
        if (stop_) return;
        queue_.push_back(std::move(batch));
        lock.unlock();
        ready_.notify_one();
      }
    }
  } catch (...) {
    std::lock_guard lock(mu_);
    error_ = std::current_exception();
  }
  {
    std::lock_guard lock(mu_);
    done_ = true;
  }
  ready_.notify_all();
}

std::optional<Batch> BatchLoader::next() {
  std::unique_lock lock(mu_);
  ready_.wait(lock, [&] { return !queue_.empty() || done_; });
  if (queue_.empty()) {
    if (error_) std::rethrow_exception(error_);
    return std::nullopt;
  }
  Batch b = std::move(queue_.front());
  queue_.pop_front();
  lock.unlock();
  space_.notify_one();
  return b;
}

}  // namespace geotrain::worker
