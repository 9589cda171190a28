#include "worker/data/idx_dataset.hpp"

#include <zlib.h>

#include <memory>
#include <string>

#include "core/error.hpp"

namespace geotrain::worker {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

uint32_t big_endian_u32(const std::vector<uint8_t>& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) |
         uint32_t{b[at + 3]};
}

// Checks the header (magic, dimensions) and that the body has exactly the bytes it announces.
void check_idx(const std::filesystem::path& path, const std::vector<uint8_t>& bytes, uint32_t magic,
               size_t header, uint64_t body) {
  GT_REQUIRE(bytes.size() >= 4, "IDX file '{}': {} bytes, too short for a header", path.string(),
             bytes.size());
  const uint32_t got = big_endian_u32(bytes, 0);
  GT_REQUIRE(got == magic, "IDX file '{}': magic number 0x{:08x}, expected 0x{:08x}", path.string(),
             got, magic);
  GT_REQUIRE(bytes.size() >= header, "IDX file '{}' is truncated: {} bytes, header needs {}",
             path.string(), bytes.size(), header);
  GT_REQUIRE(bytes.size() - header == body,
             "IDX file '{}' {}: body has {} bytes, header announces {}", path.string(),
             bytes.size() - header < body ? "is truncated" : "has trailing bytes",
             bytes.size() - header, body);
}

}  // namespace

std::vector<uint8_t> read_gzip_file(const std::filesystem::path& path) {
  std::error_code ec;
  GT_REQUIRE(std::filesystem::is_regular_file(path, ec), "data file '{}' does not exist",
             path.string());
  GzFile f(gzopen(path.c_str(), "rb"));
  GT_REQUIRE(f != nullptr, "data file '{}' cannot be opened", path.string());
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    const int n = gzread(f.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int errnum = 0;
      const char* msg = gzerror(f.get(), &errnum);
      GT_REQUIRE(false, "data file '{}' is corrupt: {}", path.string(), msg ? msg : "?");
    }
    if (n == 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  // gzread returns 0 at a premature end of a gzip stream too; gzerror tells the two apart.
  int errnum = Z_OK;
  const char* msg = gzerror(f.get(), &errnum);
  GT_REQUIRE(errnum == Z_OK, "data file '{}' is corrupt or truncated: {}", path.string(),
             msg ? msg : "?");
  return out;
}

IdxImages read_idx_images(const std::filesystem::path& path) {
  std::vector<uint8_t> bytes = read_gzip_file(path);
  GT_REQUIRE(bytes.size() >= 16, "IDX image file '{}' is truncated: {} bytes, header needs 16",
             path.string(), bytes.size());
  const uint32_t magic = big_endian_u32(bytes, 0);
  GT_REQUIRE(magic == kIdxImagesMagic, "IDX file '{}': magic number 0x{:08x}, expected 0x{:08x}",
             path.string(), magic, kIdxImagesMagic);
  IdxImages img;
  img.count = big_endian_u32(bytes, 4);
  img.rows = big_endian_u32(bytes, 8);
  img.cols = big_endian_u32(bytes, 12);
  GT_REQUIRE(img.rows > 0 && img.cols > 0 && img.rows <= 4096 && img.cols <= 4096,
             "IDX image file '{}': image size {}x{} out of range", path.string(), img.rows,
             img.cols);
  check_idx(path, bytes, kIdxImagesMagic, 16, uint64_t{img.count} * img.rows * img.cols);
  img.pixels.assign(bytes.begin() + 16, bytes.end());
  return img;
}

IdxLabels read_idx_labels(const std::filesystem::path& path) {
  std::vector<uint8_t> bytes = read_gzip_file(path);
  GT_REQUIRE(bytes.size() >= 8, "IDX label file '{}' is truncated: {} bytes, header needs 8",
             path.string(), bytes.size());
  check_idx(path, bytes, kIdxLabelsMagic, 8, big_endian_u32(bytes, 4));
  return IdxLabels{std::vector<uint8_t>(bytes.begin() + 8, bytes.end())};
}

Dataset load_fashion_mnist(const std::filesystem::path& dir, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const auto images_path = dir / (prefix + "-images-idx3-ubyte.gz");
  const auto labels_path = dir / (prefix + "-labels-idx1-ubyte.gz");
  IdxImages images = read_idx_images(images_path);
  IdxLabels labels = read_idx_labels(labels_path);
  GT_REQUIRE(labels.labels.size() == images.count,
             "dataset '{}': {} images in '{}' but {} labels in '{}'", dir.string(), images.count,
             images_path.string(), labels.labels.size(), labels_path.string());
  Dataset d;
  d.count = images.count;
  d.features = size_t{images.rows} * images.cols;
  d.classes = 10;
  for (size_t i = 0; i < labels.labels.size(); ++i)
    GT_REQUIRE(labels.labels[i] < d.classes,
               "label file '{}': label {} at index {} is not in [0, {})", labels_path.string(),
               labels.labels[i], i, d.classes);
  d.x.resize(images.pixels.size());
  for (size_t i = 0; i < images.pixels.size(); ++i)
    d.x[i] = static_cast<float>(images.pixels[i]) * (1.0f / 255.0f);
  d.y = std::move(labels.labels);
  return d;
}

}  // namespace geotrain::worker
