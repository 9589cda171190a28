#include "worker/data/text_corpus.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

#include "core/error.hpp"
#include "core/splitmix64.hpp"

namespace geotrain::worker {
namespace {

namespace fs = std::filesystem;
__extension__ typedef unsigned __int128 uint128_t;  // GCC/Clang; __extension__ quiets -Wpedantic

// Uniform in [0, bound) by Lemire's multiply-and-reject ("Fast random integer generation in an
// interval", 2019): unbiased, and a division only in the rare case that may need a redraw.
uint64_t lemire_below(uint64_t& state, uint64_t bound) {
  GT_ASSERT(bound > 0, "lemire_below: empty range");
  uint128_t m = static_cast<uint128_t>(splitmix64(state)) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    while (low < threshold) {
      m = static_cast<uint128_t>(splitmix64(state)) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

std::vector<uint8_t> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  GT_REQUIRE(in.good(), "corpus file '{}' cannot be opened", path.string());
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  GT_REQUIRE(!in.bad(), "corpus file '{}' cannot be read", path.string());
  return bytes;
}

// The regular *.txt files under `dir`, recursively, in sorted path order.
std::vector<fs::path> text_files_under(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code file_ec;
    if (it->path().extension() == ".txt" && it->is_regular_file(file_ec))
      files.push_back(it->path());
  }
  GT_REQUIRE(!ec, "corpus directory '{}' cannot be listed: {}", dir.string(), ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

void require_window(size_t bytes, size_t window, const char* split, const std::string& source) {
  GT_REQUIRE(window > 0, "{}: window is 0, must be seq_len + 1 >= 1", source);
  GT_REQUIRE(bytes >= window, "{} has {} {} bytes, fewer than one window of {} (seq_len {} + 1)",
             source, bytes, split, window, window - 1);
}

}  // namespace

// Split rule: validation = round(total * validation_fraction) bytes (nearest, halves away from
// zero), the last ones; train = the rest. Rounding to nearest keeps "the last 5%" exact whenever
// total * fraction is an integer, immune to the representation error of 0.05.
TextCorpus load_text_corpus(const fs::path& file_or_dir, double validation_fraction) {
  GT_REQUIRE(validation_fraction > 0.0 && validation_fraction <= 0.5,
             "corpus '{}': validation_fraction {} is not in (0, 0.5]", file_or_dir.string(),
             validation_fraction);
  std::error_code ec;
  const fs::file_status status = fs::status(file_or_dir, ec);
  GT_REQUIRE(fs::exists(status), "corpus '{}' does not exist", file_or_dir.string());

  TextCorpus corpus;
  if (fs::is_directory(status)) {
    corpus.files = text_files_under(file_or_dir);
    GT_REQUIRE(!corpus.files.empty(), "corpus directory '{}' has no *.txt files",
               file_or_dir.string());
  } else {
    GT_REQUIRE(fs::is_regular_file(status), "corpus '{}' is neither a file nor a directory",
               file_or_dir.string());
    corpus.files = {file_or_dir};
  }

  std::vector<uint8_t> bytes;
  size_t content = 0;  // bytes from files, not counting the '\n' joins
  for (size_t i = 0; i < corpus.files.size(); ++i) {
    if (i > 0) bytes.push_back('\n');
    const std::vector<uint8_t> file = read_file(corpus.files[i]);
    content += file.size();
    bytes.insert(bytes.end(), file.begin(), file.end());
  }
  GT_REQUIRE(content > 0, "corpus '{}' is empty: {} file(s), 0 bytes", file_or_dir.string(),
             corpus.files.size());

  const auto validation =
      static_cast<size_t>(std::llround(static_cast<double>(bytes.size()) * validation_fraction));
  GT_ASSERT(validation <= bytes.size(), "validation split {} > corpus {}", validation,
            bytes.size());
  const size_t train = bytes.size() - validation;
  corpus.validation.assign(bytes.begin() + static_cast<ptrdiff_t>(train), bytes.end());
  bytes.resize(train);
  corpus.train = std::move(bytes);
  return corpus;
}

TextWindows::TextWindows(const TextCorpus& corpus, size_t window, uint32_t batch_size,
                         uint64_t seed, uint32_t world, uint32_t rank, const std::string& source)
    : corpus_(&corpus), window_(window), seed_(seed) {
  require_window(corpus.train.size(), window, "training", source);
  GT_REQUIRE(batch_size > 0, "{}: batch_size is 0", source);
  GT_REQUIRE(world > 0, "{}: world size is 0", source);
  GT_REQUIRE(rank < world, "{}: rank {} is not below world size {}", source, rank, world);
  slice_ = {batch_size, uint64_t{world} * batch_size, uint64_t{rank} * batch_size};
}

TextWindows::TextWindows(const TextCorpus& corpus, size_t window, WindowSlice slice, uint64_t seed,
                         const std::string& source)
    : corpus_(&corpus), window_(window), slice_(slice), seed_(seed) {
  require_window(corpus.train.size(), window, "training", source);
  GT_REQUIRE(slice.batch > 0, "{}: batch_size is 0", source);
  GT_REQUIRE(slice.offset + slice.batch <= slice.stride,
             "{}: a micro-batch of {} at {} does not fit the global micro-batch of {}", source,
             slice.batch, slice.offset, slice.stride);
}

// Window k's generator state is mix64(mix64(seed) ^ k): mix64 is a bijection, so for one seed
// every k starts its own splitmix64 stream; the first draw is almost always the only one.
uint64_t TextWindows::start(uint64_t k) const {
  uint64_t state = mix64(mix64(seed_) ^ k);
  return lemire_below(state, corpus_->train.size() - window_ + 1);
}

Batch TextWindows::batch(uint64_t j) const {
  Batch b;
  b.index = j;
  b.size = slice_.batch;
  b.tokens.resize(size_t{slice_.batch} * window_);  // (B, window)
  const uint64_t first = j * slice_.stride + slice_.offset;
  for (uint32_t i = 0; i < slice_.batch; ++i) {
    const uint8_t* src = corpus_->train.data() + start(first + i);
    std::copy(src, src + window_, b.tokens.begin() + static_cast<ptrdiff_t>(i * window_));
  }
  return b;
}

// Window i starts at floor(i * (len - window) / max(1, count - 1)): the first at 0, the last
// (when count > 1) ending at the split's last byte. Windows overlap when count * window > len.
Batch validation_windows(const TextCorpus& corpus, size_t window, size_t count,
                         const std::string& source) {
  require_window(corpus.validation.size(), window, "validation", source);
  GT_REQUIRE(count > 0, "{}: validation window count is 0", source);
  const uint64_t span = corpus.validation.size() - window;
  const uint64_t steps = std::max<uint64_t>(1, count - 1);
  Batch b;
  b.size = count;
  b.tokens.resize(count * window);  // (count, window)
  for (size_t i = 0; i < count; ++i) {
    const auto at = static_cast<uint64_t>(static_cast<uint128_t>(i) * span / steps);
    const uint8_t* src = corpus.validation.data() + at;
    std::copy(src, src + window, b.tokens.begin() + static_cast<ptrdiff_t>(i * window));
  }
  return b;
}

}  // namespace geotrain::worker
