// TrainingData: what one worker trains on and what its region's leader evaluates on, for either
// kind of worker.data, so that the trainer's loop is the same for a classifier and a language
// model.
//   fashion-mnist: this worker's DistributedSampler shard of the training images through a
//     prefetching BatchLoader; the test set (leaders) for test accuracy and loss.
//   text: this worker's stream of random byte windows (TextWindows); the fixed validation
//     windows (leaders) for validation loss, bits per byte and next-byte accuracy.
//
// Owns the datasets and the loader. next() blocks only on the loader's prefetch. Not
// thread-safe (the trainer thread). InputError on data that cannot be read or does not fit the
// model (wrong feature count, a corpus shorter than one window), naming the file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "core/span.hpp"
#include "worker/backend/model_backend.hpp"
#include "worker/config.hpp"
#include "worker/data/batch_loader.hpp"
#include "worker/data/idx_dataset.hpp"
#include "worker/data/sampler.hpp"
#include "worker/data/text_corpus.hpp"

namespace geotrain::worker {

struct Evaluation {
  double loss = 0;                      // mean cross-entropy per prediction (nats)
  double accuracy = 0;                  // argmax hits per prediction (next-byte accuracy for text)
  std::optional<double> bits_per_byte;  // text: loss / ln 2 (one byte is one token)
};

// Global rank `rank`'s part of the fleet's global micro-batch (world: the workers of all
// regions): {size, world * size, rank * size} for one size, else from worker.batch_size per
// region (RegionBatches).
WindowSlice micro_batch_slice(const WorkerConfig& config, uint32_t world, uint32_t rank);

class TrainingData {
 public:
  // world: workers in all regions; rank: global rank. `evaluates`: load the held-out set.
  // micro_batches: how many next() calls the run makes (sizes the classifier's epochs).
  // first_micro_batch: where this stream starts (a worker resumed at round t starts at the
  // micro-batches of rounds 1..t-1, so that every round trains on the same data as in a run
  // that was never stopped); the classifier's loader starts at that epoch and skips the batches
  // before it.
  TrainingData(const WorkerConfig& config, uint32_t world, uint32_t rank, bool evaluates,
               uint64_t micro_batches, uint64_t first_micro_batch = 0);
  ~TrainingData();
  TrainingData(const TrainingData&) = delete;
  TrainingData& operator=(const TrainingData&) = delete;

  bool is_text() const { return corpus_ != nullptr; }
  // Training tokens in one sample: text, a window's predictions (seq_len); a classifier, 1.
  uint64_t tokens_per_sample() const { return windows_ ? windows_->window() - 1 : 1; }
  Batch next();
  // Micro-batches taken so far, counting from the start of the run (the data position a worker
  // checkpoint records).
  uint64_t position() const { return next_micro_batch_; }
  // The stream from `first_micro_batch` on, as if constructed there, without reading the data
  // again (a worker that takes its region's position after a regroup: a second or so saved).
  void reposition(uint64_t first_micro_batch);
  // Loss and accuracy of `params` on the held-out set (leaders only: GT_ASSERT otherwise).
  Evaluation evaluate(ModelBackend& model, ConstFloatSpan params) const;

 private:
  // fashion-mnist: the loader from `first_micro_batch` on.
  void start_loader(uint64_t first_micro_batch);

  std::unique_ptr<Dataset> train_, test_;
  std::vector<int32_t> test_labels_;
  std::unique_ptr<DistributedSampler> sampler_;
  std::unique_ptr<BatchLoader> loader_;
  uint32_t batch_ = 0;
  uint64_t micro_batches_ = 0;
  // text
  std::unique_ptr<TextCorpus> corpus_;
  std::unique_ptr<TextWindows> windows_;
  Batch validation_;  // (eval_windows, seq_len + 1)
  uint64_t next_micro_batch_ = 0;
  uint32_t eval_chunk_ = 1;  // validation windows per model call (the training batch)
};

}  // namespace geotrain::worker
