#include "worker/data/training_data.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.hpp"

namespace geotrain::worker {

WindowSlice micro_batch_slice(const WorkerConfig& config, uint32_t world, uint32_t rank) {
  const RegionBatches& b = config.batch_size;
  const uint32_t size = b.of_rank(config.workers, rank);
  if (!b.uneven()) return {size, uint64_t{world} * size, uint64_t{rank} * size};
  GT_ASSERT(world == config.workers.total(), "a world of {} workers, the config's fleet has {}",
            world, config.workers.total());
  return {size, b.global(config.workers), b.offset(config.workers, rank)};
}

TrainingData::TrainingData(const WorkerConfig& config, uint32_t world, uint32_t rank,
                           bool evaluates, uint64_t micro_batches, uint64_t first_micro_batch)
    : next_micro_batch_(first_micro_batch),
      // Validation windows go through the model a training micro-batch at a time: the memory the
      // steps already use. More at once grows the model's activations with them (16 windows of
      // GPT-2 124M on the CPU took 20 GB, and the end of a run was killed for it).
      eval_chunk_(config.batch_size.of_rank(config.workers, rank)) {
  if (config.data.kind == "text") {
    GT_REQUIRE(config.model.is_language_model(),
               "worker.data.kind text needs a language model (model.kind gpt), not {}",
               config.model.kind);
    const std::string source = fmt::format("corpus '{}'", config.data.path.string());
    corpus_ = std::make_unique<TextCorpus>(
        load_text_corpus(config.data.path, config.data.validation_fraction));
    const size_t window = config.model.window();
    windows_ = std::make_unique<TextWindows>(
        *corpus_, window, micro_batch_slice(config, world, rank), config.seed, source);
    if (evaluates)
      validation_ = validation_windows(*corpus_, window, config.data.eval_windows, source);
    return;
  }
  GT_REQUIRE(config.model.kind == "mlp",
             "worker.data.kind {} is for classifiers (model.kind mlp), not {}", config.data.kind,
             config.model.kind);
  const models::MlpConfig mlp = models::parse_mlp_config(config.model.arch);
  train_ = std::make_unique<Dataset>(load_fashion_mnist(config.data.path, Split::kTrain));
  GT_REQUIRE(train_->features == mlp.inputs && train_->classes <= mlp.classes,
             "model.arch '{}' takes {} inputs and {} classes, the data in '{}' has {} features "
             "and {} classes",
             config.model.arch, mlp.inputs, mlp.classes, config.data.path.string(),
             train_->features, train_->classes);
  if (evaluates) {
    test_ = std::make_unique<Dataset>(load_fashion_mnist(config.data.path, Split::kTest));
    test_labels_.assign(test_->y.begin(), test_->y.end());
  }
  sampler_ = std::make_unique<DistributedSampler>(
      SamplerOptions{train_->count, world, rank, true, config.seed, false});
  batch_ = config.batch_size.of_rank(config.workers, rank);
  micro_batches_ = micro_batches;
  start_loader(first_micro_batch);
}

void TrainingData::start_loader(uint64_t first_micro_batch) {
  loader_.reset();  // its prefetch ends before the next one starts
  const uint64_t batches_per_epoch = (sampler_->samples_per_rank() + batch_ - 1) / batch_;
  LoaderOptions lo;
  lo.batch_size = batch_;
  const uint64_t epochs =
      std::max<uint64_t>(1, (micro_batches_ + batches_per_epoch - 1) / batches_per_epoch);
  lo.first_epoch = first_micro_batch / batches_per_epoch;
  lo.epochs = std::max<uint64_t>(1, epochs > lo.first_epoch ? epochs - lo.first_epoch : 1);
  loader_ = std::make_unique<BatchLoader>(*train_, *sampler_, lo);
  for (uint64_t skip = first_micro_batch % batches_per_epoch; skip > 0; --skip)
    GT_ASSERT(loader_->next().has_value(), "the loader ran out while skipping to micro-batch {}",
              first_micro_batch);
}

void TrainingData::reposition(uint64_t first_micro_batch) {
  next_micro_batch_ = first_micro_batch;
  if (!windows_) start_loader(first_micro_batch);  // text windows are drawn by their index
}

TrainingData::~TrainingData() = default;

Batch TrainingData::next() {
  if (windows_) return windows_->batch(next_micro_batch_++);
  auto batch = loader_->next();
  GT_ASSERT(batch.has_value(), "the loader ran out of batches after {} micro-batches",
            next_micro_batch_);
  ++next_micro_batch_;
  return std::move(*batch);
}

Evaluation TrainingData::evaluate(ModelBackend& model, ConstFloatSpan params) const {
  double loss = 0;
  size_t correct = 0, predictions = 0;
  if (corpus_) {
    GT_ASSERT(validation_.size > 0, "evaluate() on a worker that did not load the validation set");
    const size_t row = validation_.tokens.size() / validation_.size;
    for (size_t begin = 0; begin < validation_.size; begin += eval_chunk_) {
      const size_t n = std::min<size_t>(eval_chunk_, validation_.size - begin);
      const auto r = model.evaluate(
          params, models::BatchView{n, nullptr, nullptr, validation_.tokens.data() + begin * row});
      loss += r.loss_sum;
      correct += r.correct;
      predictions += r.predictions;
    }
  } else {
    GT_ASSERT(test_ != nullptr, "evaluate() on a worker that did not load the test set");
    constexpr size_t kChunk = 1000;
    for (size_t begin = 0; begin < test_->count; begin += kChunk) {
      const size_t n = std::min(kChunk, test_->count - begin);
      const auto r =
          model.evaluate(params, models::BatchView{n, test_->x.data() + begin * test_->features,
                                                   test_labels_.data() + begin, nullptr});
      loss += r.loss_sum;
      correct += r.correct;
      predictions += r.predictions;
    }
  }
  GT_ASSERT(predictions > 0, "an evaluation with no predictions");
  Evaluation e;
  e.loss = loss / double(predictions);
  e.accuracy = double(correct) / double(predictions);
  if (corpus_) e.bits_per_byte = e.loss / std::numbers::ln2;
  return e;
}

}  // namespace geotrain::worker
