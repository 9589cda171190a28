// BatchLoader: a prefetching thread that gathers this worker's mini-batches.
//
// Owns: one producer thread and a bounded queue of ready batches (at most `prefetch`). The
// thread walks epochs first_epoch, first_epoch + 1, ... of a DistributedSampler, cuts each
// epoch's indices into batches of `batch_size` (the last, shorter batch is kept unless
// drop_last_batch) and copies the rows out of the dataset. next() blocks until a batch is ready
// and returns nullopt after the last epoch. An exception in the thread is rethrown by next().
// The destructor stops and joins the thread (RAII), also while it waits on a full queue.
// Borrows the dataset: it must outlive the loader. next() is for one consumer thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "worker/data/idx_dataset.hpp"
#include "worker/data/sampler.hpp"

namespace geotrain::worker {

struct Batch {
  uint64_t epoch = 0;
  uint64_t index = 0;           // batch number within the epoch
  size_t size = 0;              // B
  std::vector<float> x;         // (B, features): classifiers
  std::vector<int32_t> y;       // (B): classifiers
  std::vector<int32_t> tokens;  // (B, seq_len + 1): language models (worker/data/text_corpus.hpp)
};

struct LoaderOptions {
  uint32_t batch_size = 64;
  uint32_t prefetch = 4;  // ready batches held at most
  uint64_t first_epoch = 0;
  uint64_t epochs = 1;
  bool drop_last_batch = false;
};

class BatchLoader {
 public:
  // InputError when batch_size or prefetch is 0.
  BatchLoader(const Dataset& data, const DistributedSampler& sampler, const LoaderOptions& options);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Blocks until the next batch is ready; nullopt when every epoch has been delivered.
  std::optional<Batch> next();
  // Batches per epoch for this worker.
  uint64_t batches_per_epoch() const;

 private:
  void produce();

  const Dataset& data_;
  DistributedSampler sampler_;
  LoaderOptions options_;
  std::mutex mu_;
  std::condition_variable ready_;  // consumer waits: queue not empty, or done
  std::condition_variable space_;  // producer waits: queue not full, or stopping
  std::deque<Batch> queue_;
  bool done_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last member: started after everything above exists
};

}  // namespace geotrain::worker
