// Data: IDX files written and gzipped by the test itself, the sampler's DistributedSampler
// semantics, the prefetching loader, and the real Fashion-MNIST files when installed.
#include <doctest/doctest.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "tests/temp_dir.hpp"
#include "worker/config.hpp"
#include "worker/data/batch_loader.hpp"
#include "worker/data/idx_dataset.hpp"
#include "worker/data/sampler.hpp"
#include "worker/data/training_data.hpp"

namespace fs = std::filesystem;
using namespace geotrain;
using namespace geotrain::worker;

namespace {

void put_be32(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

void write_gz(const fs::path& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

// Image i has every pixel equal to i (mod 256); its label is i % 10.
std::vector<uint8_t> images_idx(uint32_t n, uint32_t rows, uint32_t cols) {
  std::vector<uint8_t> b;
  put_be32(b, kIdxImagesMagic);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (uint32_t i = 0; i < n; ++i) b.insert(b.end(), size_t{rows} * cols, static_cast<uint8_t>(i));
  return b;
}

std::vector<uint8_t> labels_idx(uint32_t n) {
  std::vector<uint8_t> b;
  put_be32(b, kIdxLabelsMagic);
  put_be32(b, n);
  for (uint32_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(i % 10));
  return b;
}

void write_split(const fs::path& dir, const std::string& prefix, uint32_t n) {
  write_gz(dir / (prefix + "-images-idx3-ubyte.gz"), images_idx(n, 2, 3));
  write_gz(dir / (prefix + "-labels-idx1-ubyte.gz"), labels_idx(n));
}

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no InputError>";
}

}  // namespace

TEST_CASE("IDX files written by the test read back with their shapes, pixels and labels") {
  geotrain::test::TempDir tmp("data");
  write_split(tmp.path(), "train", 25);
  const Dataset d = load_fashion_mnist(tmp.path(), Split::kTrain);
  CHECK(d.count == 25);
  CHECK(d.features == 6);
  CHECK(d.classes == 10);
  REQUIRE(d.x.size() == 25 * 6);
  CHECK(d.x[7 * 6 + 5] == doctest::Approx(7.0 / 255.0));
  CHECK(d.y[13] == 3);
}

TEST_CASE("a missing, truncated, non-gzip or wrongly tagged file is an InputError naming it") {
  geotrain::test::TempDir tmp("data");
  const fs::path img = tmp.path() / "train-images-idx3-ubyte.gz";
  const fs::path lab = tmp.path() / "train-labels-idx1-ubyte.gz";

  std::string msg = error_of([&] { load_fashion_mnist(tmp.path(), Split::kTrain); });
  CHECK(msg.find(img.string()) != std::string::npos);
  CHECK(msg.find("does not exist") != std::string::npos);

  // Body shorter than the header announces.
  std::vector<uint8_t> short_body = images_idx(10, 2, 3);
  short_body.resize(short_body.size() - 5);
  write_gz(img, short_body);
  msg = error_of([&] { read_idx_images(img); });
  CHECK(msg.find("truncated") != std::string::npos);
  CHECK(msg.find(img.string()) != std::string::npos);

  // A gzip stream cut in the middle.
  write_gz(img, images_idx(200, 28, 28));
  const auto full = fs::file_size(img);
  fs::resize_file(img, full / 2);
  msg = error_of([&] { read_idx_images(img); });
  CHECK(msg.find(img.string()) != std::string::npos);
  CHECK((msg.find("truncated") != std::string::npos || msg.find("corrupt") != std::string::npos));

  // Labels where images are expected: wrong magic number.
  write_gz(img, labels_idx(10));
  msg = error_of([&] { read_idx_images(img); });
  CHECK(msg.find("magic number 0x00000801, expected 0x00000803") != std::string::npos);

  // Counts that disagree between the two files.
  write_gz(img, images_idx(10, 2, 3));
  write_gz(lab, labels_idx(9));
  msg = error_of([&] { load_fashion_mnist(tmp.path(), Split::kTrain); });
  CHECK(msg.find("10 images") != std::string::npos);
  CHECK(msg.find("9 labels") != std::string::npos);
}

TEST_CASE("sampler shards are disjoint, cover the dataset and reshuffle each epoch") {
  const uint64_t n = 120;
  const uint32_t regions = 2, per_region = 3;
  std::vector<uint64_t> all;
  for (uint32_t r = 0; r < regions; ++r)
    for (uint32_t w = 0; w < per_region; ++w) {
      DistributedSampler s(
          {n, regions * per_region, r * per_region + w, true, 7, false});  // ranks by region
      CHECK(s.samples_per_rank() == 20);
      const auto idx = s.indices(3);
      all.insert(all.end(), idx.begin(), idx.end());
    }
  std::sort(all.begin(), all.end());
  std::vector<uint64_t> expected(n);
  for (uint64_t i = 0; i < n; ++i) expected[i] = i;
  CHECK(all == expected);  // every sample exactly once

  DistributedSampler s0({n, 6, 0, true, 7, false});
  CHECK(s0.indices(1) != s0.indices(2));  // new order each epoch
  CHECK(s0.indices(2) == s0.indices(2));  // deterministic
  DistributedSampler other_seed({n, 6, 0, true, 8, false});
  CHECK(other_seed.indices(2) != s0.indices(2));
  // Strided slices of one permutation, as in PyTorch.
  const auto perm = shuffled_indices(n, 7, 5);
  const auto r4 = DistributedSampler({n, 6, 4, true, 7, false}).indices(5);
  for (size_t i = 0; i < r4.size(); ++i) CHECK(r4[i] == perm[4 + 6 * i]);
}

TEST_CASE("sampler pads by wrapping around without drop_last and truncates with it") {
  // 10 samples, 4 workers: padded to 12 (indices 0 and 1 twice), or cut to 8.
  std::vector<uint64_t> padded, dropped;
  for (uint32_t r = 0; r < 4; ++r) {
    auto p = DistributedSampler({10, 4, r, false, 0, false}).indices(0);
    auto d = DistributedSampler({10, 4, r, false, 0, true}).indices(0);
    CHECK(p.size() == 3);
    CHECK(d.size() == 2);
    padded.insert(padded.end(), p.begin(), p.end());
    dropped.insert(dropped.end(), d.begin(), d.end());
  }
  std::sort(padded.begin(), padded.end());
  std::sort(dropped.begin(), dropped.end());
  CHECK(padded == std::vector<uint64_t>{0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(dropped == std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK_THROWS_AS(DistributedSampler({10, 4, 4, false, 0, false}), InputError);
  CHECK_THROWS_AS(DistributedSampler({3, 4, 0, false, 0, false}), InputError);
}

TEST_CASE("the loader delivers every epoch's batches in sampler order, then ends") {
  geotrain::test::TempDir tmp("data");
  write_split(tmp.path(), "t10k", 23);
  const Dataset d = load_fashion_mnist(tmp.path(), Split::kTest);
  DistributedSampler sampler({d.count, 1, 0, true, 11, false});
  BatchLoader loader(d, sampler, {.batch_size = 5, .prefetch = 2, .first_epoch = 4, .epochs = 2});
  CHECK(loader.batches_per_epoch() == 5);
  for (uint64_t e = 4; e < 6; ++e) {
    const auto idx = sampler.indices(e);
    size_t pos = 0;
    for (uint64_t b = 0; b < 5; ++b) {
      auto batch = loader.next();
      REQUIRE(batch.has_value());
      CHECK(batch->epoch == e);
      CHECK(batch->index == b);
      CHECK(batch->size == (b < 4 ? 5u : 3u));
      for (size_t i = 0; i < batch->size; ++i, ++pos) {
        CHECK(batch->y[i] == static_cast<int32_t>(idx[pos] % 10));
        CHECK(batch->x[i * 6] == doctest::Approx(static_cast<double>(idx[pos]) / 255.0));
      }
    }
  }
  CHECK_FALSE(loader.next().has_value());
}

TEST_CASE("a loader destroyed while its queue is full stops and joins its thread") {
  geotrain::test::TempDir tmp("data");
  write_split(tmp.path(), "t10k", 50);
  const Dataset d = load_fashion_mnist(tmp.path(), Split::kTest);
  DistributedSampler sampler({d.count, 2, 1, true, 1, false});
  auto loader = std::make_unique<BatchLoader>(
      d, sampler, LoaderOptions{.batch_size = 2, .prefetch = 1, .epochs = 1000});
  CHECK(loader->next().has_value());
  // The producer is now blocked on the full queue; destroying the loader must wake and join it.
  auto destroyed = std::async(std::launch::async, [&] { loader.reset(); });
  REQUIRE(destroyed.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  CHECK(loader == nullptr);
}

TEST_CASE("the installed Fashion-MNIST test split has 10000 labelled 28x28 images") {
  const fs::path dir = kFashionMnistDir;
  if (!fs::exists(dir / "t10k-images-idx3-ubyte.gz")) {
    MESSAGE("Fashion-MNIST not installed under " << dir << ": checking the error instead");
    CHECK_THROWS_AS(load_fashion_mnist(dir, Split::kTest), InputError);
    return;
  }
  const Dataset d = load_fashion_mnist(dir, Split::kTest);
  CHECK(d.count == 10000);
  CHECK(d.features == 784);
  std::vector<int> per_class(10, 0);
  for (uint8_t y : d.y) ++per_class[y];
  for (int c : per_class) CHECK(c == 1000);  // the test split is balanced
  const auto [lo, hi] = std::minmax_element(d.x.begin(), d.x.end());
  CHECK(*lo == 0.0f);
  CHECK(*hi == 1.0f);
}

TEST_CASE("training data moved to a micro-batch gives what a stream started there gives") {
  // A worker that takes its region's position after a regroup moves its stream there without
  // reading the data again; the batches must be those of a stream constructed at that position.
  geotrain::test::TempDir tmp("data-reposition");
  const fs::path dir = tmp.path();
  write_split(dir, "train", 100);
  const auto config = parse_worker_config(
      "regions: [a]\nmodel: {arch: \"6-10\"}\nworker: {batch_size: 8, data: {path: \"" +
          dir.string() + "\"}}\n",
      "t.yaml");
  constexpr uint64_t kRun = 60;  // 13 micro-batches per epoch: the stream crosses epochs
  for (uint64_t to : {uint64_t{17}, uint64_t{5}, uint64_t{39}}) {
    TrainingData fresh(config, 1, 0, false, kRun, to);
    TrainingData moved(config, 1, 0, false, kRun, 0);
    for (int i = 0; i < 3; ++i) moved.next();
    moved.reposition(to);
    CHECK(moved.position() == to);
    for (uint64_t k = to; k < kRun; ++k) {
      const auto want = fresh.next(), got = moved.next();
      INFO("moved to " << to << ", micro-batch " << k);
      CHECK(got.epoch == want.epoch);
      CHECK(got.index == want.index);
      CHECK(got.x == want.x);
      CHECK(got.y == want.y);
    }
  }
}
