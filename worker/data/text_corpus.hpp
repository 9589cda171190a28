// Text data for language models: a byte-level corpus, its deterministic train/validation split,
// and the windows a worker trains and evaluates on.
//
// TextCorpus reads one UTF-8 file, or every `*.txt` file under a directory (recursively, in
// sorted path order, joined by one '\n'), as bytes: the byte-level tokenizer maps byte b to
// token b (vocabulary 256), so no vocabulary file is needed. The last `validation_fraction` of
// the bytes (default 5%) is the validation split, the rest is the training split: validation
// holds round(total * validation_fraction) bytes (to nearest), so exactly 5% when that is whole.
//
// TextWindows: training samples are windows of `window` = seq_len + 1 consecutive bytes of the
// training split. Window k of the run's one global stream starts at a position drawn uniformly
// from [0, train_bytes - window] by a counter-based generator of (seed, k): any process can
// compute any window without state. DistributedSampler semantics over every worker of every
// region: at micro-batch j, the world's windows are k in [j W B, (j + 1) W B), and global rank
// r takes k = (j W + r) B + i, i in [0, B). The streams of different ranks are disjoint, and one
// process with batch W B sees exactly the union of W workers' batches (what exactness tests need).
// Validation: `count` windows evenly spaced over the validation split, the same in every run:
// window i starts at floor(i (len - window) / max(1, count - 1)); they overlap if they must.
// `source` names the corpus in error messages, e.g. "corpus '/data/kjv.txt'". TextWindows
// borrows the corpus: it must outlive the TextWindows.
//
// Const methods are thread-safe; nothing blocks. Bad input (a missing path, a directory
// without *.txt files, an empty corpus, a validation_fraction outside (0, 0.5], a split shorter
// than one window) is an InputError naming the path and the sizes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "worker/data/batch_loader.hpp"

namespace geotrain::worker {

struct TextCorpus {
  std::vector<uint8_t> train;       // bytes = tokens
  std::vector<uint8_t> validation;  // the last validation_fraction of the bytes
  std::vector<std::filesystem::path> files;
  uint64_t total_bytes() const { return train.size() + validation.size(); }
};

TextCorpus load_text_corpus(const std::filesystem::path& file_or_dir,
                            double validation_fraction = 0.05);

// Where one worker's micro-batches lie in the global stream of windows: its micro-batch j is
// windows [j * stride + offset, j * stride + offset + batch). Ranks of one fleet share `stride`
// (the fleet's global micro-batch) and have disjoint [offset, offset + batch) within it.
struct WindowSlice {
  uint32_t batch = 1;
  uint64_t stride = 1;
  uint64_t offset = 0;
};

class TextWindows {
 public:
  // InputError (naming `source`) when the training split is shorter than one window, or when
  // batch_size or world is 0 or rank >= world. Rank `rank` of `world` workers of one batch size:
  // the slice {batch_size, world * batch_size, rank * batch_size}.
  TextWindows(const TextCorpus& corpus, size_t window, uint32_t batch_size, uint64_t seed,
              uint32_t world, uint32_t rank, const std::string& source = "the corpus");
  // Any slice (an uneven fleet's: RegionBatches::global and offset); InputError when its batch
  // is 0 or it does not fit its stride.
  TextWindows(const TextCorpus& corpus, size_t window, WindowSlice slice, uint64_t seed,
              const std::string& source = "the corpus");
  // Start (into corpus.train) of window k of the global stream.
  uint64_t start(uint64_t k) const;
  // This rank's micro-batch j: Batch.size = B, Batch.tokens (B, window) as int32 tokens,
  // Batch.index = j. x and y stay empty.
  Batch batch(uint64_t j) const;

  // Bytes per window: seq_len + 1 (a window trains seq_len predictions).
  size_t window() const { return window_; }

 private:
  const TextCorpus* corpus_;
  size_t window_;
  WindowSlice slice_;
  uint64_t seed_;
};

// `count` validation windows (B = count, tokens (count, window)) evenly spaced over the
// validation split; InputError when it is shorter than one window.
Batch validation_windows(const TextCorpus& corpus, size_t window, size_t count,
                         const std::string& source = "the corpus");

}  // namespace geotrain::worker
