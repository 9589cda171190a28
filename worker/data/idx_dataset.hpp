// IDX datasets (the MNIST / Fashion-MNIST file format), read from gzip files with zlib.
//
// Owns: nothing beyond the returned values. read_idx_* parse one file; load_fashion_mnist reads
// the pair of files of one split from a directory (default: the Debian package's location) and
// returns pixels scaled to [0, 1]. Every problem with a file (missing, not gzip, truncated,
// wrong magic number, dimensions that disagree) throws InputError naming the file and the
// problem. Blocking (file I/O); no shared state, so calls are thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace geotrain::worker {

inline constexpr uint32_t kIdxImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct IdxImages {
  uint32_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // (count, rows, cols), row-major
};

struct IdxLabels {
  std::vector<uint8_t> labels;  // (count)
};

// A labelled classification dataset held in memory.
struct Dataset {
  size_t count = 0;
  size_t features = 0;     // e.g. 784
  uint32_t classes = 0;    // labels are in [0, classes)
  std::vector<float> x;    // (count, features), in [0, 1]
  std::vector<uint8_t> y;  // (count)
};

enum class Split { kTrain, kTest };

// The whole decompressed content of a gzip file (a plain file is returned as is, zlib's rule).
std::vector<uint8_t> read_gzip_file(const std::filesystem::path& path);

IdxImages read_idx_images(const std::filesystem::path& path);
IdxLabels read_idx_labels(const std::filesystem::path& path);

// Reads <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz; labels must be < 10 and the two
// files must agree on the count.
Dataset load_fashion_mnist(const std::filesystem::path& dir, Split split);

}  // namespace geotrain::worker
