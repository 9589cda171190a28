// Text data for the language model: corpus files written by the test itself, the train/validation
// split, the counter-based training windows with DistributedSampler semantics, the fixed
// validation windows, and the real King James Bible corpus that scripts/bootstrap.sh installs.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/region_workers.hpp"
#include "tests/temp_dir.hpp"
#include "worker/data/text_corpus.hpp"

namespace fs = std::filesystem;
using namespace geotrain;
using namespace geotrain::worker;
using geotrain::test::TempDir;

namespace {

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

// n bytes covering every value 0..255 (high bytes too, to catch sign-extension into tokens),
// from the test's own generator so the corpus does not depend on the code under test.
std::string random_bytes(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  uint64_t x = seed;
  for (char& c : s) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    c = static_cast<char>(x >> 56);
  }
  return s;
}

std::string as_string(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

std::string corpus_name(const fs::path& path) { return fmt::format("corpus '{}'", path.string()); }

// A corpus whose training split has `train` zero bytes (the windows' starts are all we look at).
TextCorpus sized_corpus(size_t train, size_t validation = 0) {
  TextCorpus c;
  c.train.assign(train, 0);
  c.validation.assign(validation, 0);
  return c;
}

}  // namespace

TEST_CASE("a text corpus file's last 5% of bytes, rounded to nearest, is the validation split") {
  TempDir dir("text-split");
  struct Case {
    size_t total;
    double fraction;
    size_t validation;
  };
  // 1010 * 5% = 50.5 rounds up; 1009 * 5% = 50.45 rounds down; 7 * 50% = 3.5 rounds up.
  for (const Case c : {Case{1000, 0.05, 50}, Case{2000, 0.05, 100}, Case{1010, 0.05, 51},
                       Case{1009, 0.05, 50}, Case{7, 0.5, 4}, Case{1000, 0.1, 100}}) {
    CAPTURE(c.total);
    CAPTURE(c.fraction);
    const std::string text = random_bytes(c.total, c.total);
    const fs::path path = dir.path() / fmt::format("t{}.txt", c.total);
    write_file(path, text);
    const TextCorpus corpus = load_text_corpus(path, c.fraction);
    CHECK(corpus.total_bytes() == c.total);
    CHECK(corpus.validation.size() == c.validation);
    CHECK(as_string(corpus.train) == text.substr(0, c.total - c.validation));
    CHECK(as_string(corpus.validation) == text.substr(c.total - c.validation));
    CHECK(corpus.files == std::vector<fs::path>{path});
  }
}

TEST_CASE(
    "a text corpus directory reads every *.txt below it in sorted path order, joined by \\n") {
  TempDir dir("text-dir");
  const fs::path root = dir.path() / "corpus";
  write_file(root / "b.txt", "bb");
  write_file(root / "a.txt", "a");
  write_file(root / "Z.txt", "Z");  // 'Z' < 'a': byte order, not case-folded
  write_file(root / "sub" / "c.txt", "ccc");
  write_file(root / "sub" / "notes.md", "not text");
  write_file(root / "notes.txt" / "d.txt", "dd");  // a directory named *.txt is walked, not read
  write_file(root / "readme", "no extension");

  const TextCorpus corpus = load_text_corpus(root);
  CHECK(corpus.files == std::vector<fs::path>{root / "Z.txt", root / "a.txt", root / "b.txt",
                                              root / "notes.txt" / "d.txt",
                                              root / "sub" / "c.txt"});
  // 13 bytes; 5% is 0.65, rounded to 1 validation byte.
  CHECK(as_string(corpus.train) == "Z\na\nbb\ndd\ncc");
  CHECK(as_string(corpus.validation) == "c");
}

TEST_CASE("a missing text corpus path is an input error naming it") {
  TempDir dir("text-missing");
  const fs::path path = dir.path() / "nope.txt";
  CHECK_THROWS_WITH_AS(load_text_corpus(path),
                       fmt::format("corpus '{}' does not exist", path.string()).c_str(),
                       InputError);
}

TEST_CASE("a text corpus directory without *.txt files is an input error naming it") {
  TempDir dir("text-no-txt");
  write_file(dir.path() / "data.md", "markdown is not read");
  CHECK_THROWS_WITH_AS(
      load_text_corpus(dir.path()),
      fmt::format("corpus directory '{}' has no *.txt files", dir.path().string()).c_str(),
      InputError);
}

TEST_CASE("an empty text corpus is an input error naming it") {
  TempDir dir("text-empty");
  const fs::path file = dir.path() / "empty.txt";
  write_file(file, "");
  CHECK_THROWS_WITH_AS(
      load_text_corpus(file),
      fmt::format("corpus '{}' is empty: 1 file(s), 0 bytes", file.string()).c_str(), InputError);
  // Two empty files would join to "\n"; that is still no text.
  const fs::path folder = dir.path() / "folder";
  write_file(folder / "a.txt", "");
  write_file(folder / "b.txt", "");
  CHECK_THROWS_WITH_AS(
      load_text_corpus(folder),
      fmt::format("corpus '{}' is empty: 2 file(s), 0 bytes", folder.string()).c_str(), InputError);
}

TEST_CASE("a text corpus validation_fraction outside (0, 0.5] is an input error naming it") {
  TempDir dir("text-fraction");
  const fs::path file = dir.path() / "t.txt";
  write_file(file, random_bytes(100, 1));
  for (const double f : {0.0, -0.1, 0.6, 1.0}) {
    CAPTURE(f);
    CHECK_THROWS_WITH_AS(
        load_text_corpus(file, f),
        fmt::format("corpus '{}': validation_fraction {} is not in (0, 0.5]", file.string(), f)
            .c_str(),
        InputError);
  }
  CHECK(load_text_corpus(file, 0.5).validation.size() == 50);
}

TEST_CASE("a text corpus split shorter than one window is an input error naming path and sizes") {
  TempDir dir("text-short");
  const fs::path file = dir.path() / "short.txt";
  write_file(file, random_bytes(105, 2));  // 5% of 105 is 5.25: 5 validation, 100 training bytes
  const TextCorpus corpus = load_text_corpus(file);
  REQUIRE(corpus.train.size() == 100);
  REQUIRE(corpus.validation.size() == 5);
  const std::string name = corpus_name(file);

  CHECK_THROWS_WITH_AS(TextWindows(corpus, 129, 1, 0, 1, 0, name),
                       fmt::format("corpus '{}' has 100 training bytes, fewer than one window of "
                                   "129 (seq_len 128 + 1)",
                                   file.string())
                           .c_str(),
                       InputError);
  CHECK_THROWS_WITH_AS(validation_windows(corpus, 6, 1, name),
                       fmt::format("corpus '{}' has 5 validation bytes, fewer than one window of "
                                   "6 (seq_len 5 + 1)",
                                   file.string())
                           .c_str(),
                       InputError);
  // Exactly one window fits: accepted, and its only possible start is 0.
  const TextWindows exact(corpus, 100, 2, 7, 1, 0, name);
  CHECK(exact.start(0) == 0);
  CHECK(exact.start(12345) == 0);
  CHECK(validation_windows(corpus, 5, 3, name).tokens.size() == 15);
}

TEST_CASE("text windows with batch size 0, world 0 or rank beyond the world are input errors") {
  const TextCorpus corpus = sized_corpus(1000);
  CHECK_THROWS_WITH_AS(TextWindows(corpus, 10, 0, 0, 1, 0, "corpus 'c'"),
                       "corpus 'c': batch_size is 0", InputError);
  CHECK_THROWS_WITH_AS(TextWindows(corpus, 10, 4, 0, 0, 0, "corpus 'c'"),
                       "corpus 'c': world size is 0", InputError);
  CHECK_THROWS_WITH_AS(TextWindows(corpus, 10, 4, 0, 3, 3, "corpus 'c'"),
                       "corpus 'c': rank 3 is not below world size 3", InputError);
  CHECK_THROWS_WITH_AS(validation_windows(sized_corpus(10, 10), 4, 0, "corpus 'c'"),
                       "corpus 'c': validation window count is 0", InputError);
}

TEST_CASE("a text window's tokens are the corpus bytes at the window's start") {
  TempDir dir("text-bytes");
  const fs::path file = dir.path() / "bytes.txt";
  const std::string text = random_bytes(5000, 3);
  write_file(file, text);
  const TextCorpus corpus = load_text_corpus(file);
  REQUIRE(corpus.train.size() == 4750);
  const size_t window = 65;
  const uint32_t batch = 3;
  const TextWindows windows(corpus, window, batch, 42, 1, 0);
  for (uint64_t j = 0; j < 10; ++j) {
    const Batch b = windows.batch(j);
    CHECK(b.index == j);
    CHECK(b.size == batch);
    CHECK(b.x.empty());
    CHECK(b.y.empty());
    REQUIRE(b.tokens.size() == batch * window);
    for (uint32_t i = 0; i < batch; ++i) {
      const uint64_t at = windows.start(j * batch + i);
      for (size_t t = 0; t < window; ++t)
        REQUIRE(b.tokens[i * window + t] ==
                static_cast<int32_t>(static_cast<uint8_t>(text[at + t])));
    }
  }
}

TEST_CASE("text windows are a function of the seed and the window number alone") {
  const TextCorpus corpus = sized_corpus(100000);
  const TextWindows a(corpus, 129, 8, 1234, 1, 0);
  const TextWindows again(corpus, 129, 8, 1234, 1, 0);
  const TextWindows other_rank(corpus, 129, 2, 1234, 4, 3);  // the stream is global
  const TextWindows other_seed(corpus, 129, 8, 1235, 1, 0);
  int same_start_other_seed = 0;
  std::set<uint64_t> distinct;
  for (uint64_t k = 0; k < 2000; ++k) {
    CHECK(a.start(k) == again.start(k));
    CHECK(a.start(k) == other_rank.start(k));
    same_start_other_seed += a.start(k) == other_seed.start(k);
    distinct.insert(a.start(k));
  }
  // 2000 draws from 99872 starts: ~0.02 coincidences expected between seeds, ~20 repeats within.
  CHECK(same_start_other_seed <= 3);
  CHECK(distinct.size() >= 1900);
  for (uint64_t j = 0; j < 5; ++j) CHECK(a.batch(j).tokens == again.batch(j).tokens);
}

TEST_CASE("W text-window ranks with batch B together see one process's batch W*B, disjointly") {
  TempDir dir("text-ranks");
  const fs::path file = dir.path() / "ranks.txt";
  write_file(file, random_bytes(200000, 4));
  const TextCorpus corpus = load_text_corpus(file);
  const size_t window = 17;
  const uint32_t world = 3, batch = 4;
  const TextWindows whole(corpus, window, world * batch, 99, 1, 0);
  std::vector<TextWindows> ranks;
  for (uint32_t r = 0; r < world; ++r) ranks.emplace_back(corpus, window, batch, 99, world, r);

  for (uint64_t j = 0; j < 6; ++j) {
    CAPTURE(j);
    const Batch one = whole.batch(j);
    // The world's micro-batch j is windows [j W B, (j + 1) W B) of the global stream.
    for (uint32_t i = 0; i < world * batch; ++i) {
      const uint64_t at = whole.start(j * world * batch + i);
      const std::vector<int32_t> expected(corpus.train.begin() + at,
                                          corpus.train.begin() + at + window);
      CHECK(std::equal(expected.begin(), expected.end(), one.tokens.begin() + i * window));
    }
    // Rank r holds rows [r B, (r + 1) B) of it, so ranks' windows are disjoint slices.
    std::vector<int32_t> joined;
    std::set<std::vector<int32_t>> per_rank;
    for (const TextWindows& rank : ranks) {
      const Batch part = rank.batch(j);
      CHECK(part.size == batch);
      joined.insert(joined.end(), part.tokens.begin(), part.tokens.end());
      per_rank.insert(part.tokens);
    }
    CHECK(joined == one.tokens);
    CHECK(per_rank.size() == world);
  }
}

TEST_CASE(
    "an uneven fleet's ranks, each with its region's micro-batch, together see the global "
    "micro-batch, disjointly and in rank order") {
  TempDir dir("text-uneven");
  const fs::path file = dir.path() / "uneven.txt";
  write_file(file, random_bytes(200000, 5));
  const TextCorpus corpus = load_text_corpus(file);
  const size_t window = 17;
  // Region a: 2 workers of 3 windows; b: 1 worker of 5; c: 2 of 1. Global micro-batch 13.
  const RegionWorkers workers({"a", "b", "c"}, {2, 1, 2});
  const RegionBatches sizes({"a", "b", "c"}, {3, 5, 1});
  REQUIRE(sizes.uneven());
  CHECK(sizes.text() == "{a: 3, b: 5, c: 1}");
  REQUIRE(sizes.global(workers) == 13);
  const std::vector<uint64_t> offsets = {0, 3, 6, 11, 12};
  const TextWindows whole(corpus, window, 13, 99, 1, 0);
  std::vector<TextWindows> ranks;
  for (uint32_t r = 0; r < workers.total(); ++r) {
    CHECK(sizes.offset(workers, r) == offsets[r]);
    ranks.emplace_back(corpus, window,
                       WindowSlice{sizes.of_rank(workers, r), 13, sizes.offset(workers, r)}, 99);
  }
  for (uint64_t j = 0; j < 4; ++j) {
    CAPTURE(j);
    std::vector<int32_t> joined;
    for (uint32_t r = 0; r < workers.total(); ++r) {
      const Batch part = ranks[r].batch(j);
      CHECK(part.size == sizes.of_rank(workers, r));
      joined.insert(joined.end(), part.tokens.begin(), part.tokens.end());
    }
    CHECK(joined == whole.batch(j).tokens);
  }
  // One size for every region is the uniform layout, bit for bit.
  const RegionBatches same({"a", "b", "c"}, {4, 4, 4});
  CHECK_FALSE(same.uneven());
  CHECK(same.text() == "4");
  CHECK(same.offset(workers, 3) == 12);
  CHECK(TextWindows(corpus, window, WindowSlice{4, 20, 12}, 7).batch(2).tokens ==
        TextWindows(corpus, window, 4, 7, 5, 3).batch(2).tokens);
  CHECK_THROWS_WITH_AS(TextWindows(corpus, window, WindowSlice{4, 13, 12}, 7, "corpus 'c'"),
                       doctest::Contains("corpus 'c': a micro-batch of 4 at 12 does not fit the "
                                         "global micro-batch of 13"),
                       InputError);
}

TEST_CASE("text window starts stay in range and cover the training split uniformly") {
  const size_t window = 8;
  SUBCASE("tiny ranges reach both ends") {
    for (const int starts : {1, 2, 3, 7}) {
      CAPTURE(starts);
      const TextCorpus corpus = sized_corpus(static_cast<size_t>(starts) + window - 1);
      const TextWindows w(corpus, window, 1, 5, 1, 0);
      std::vector<int> seen(static_cast<size_t>(starts), 0);
      for (uint64_t k = 0; k < 3000; ++k) {
        const uint64_t s = w.start(k);
        REQUIRE(s < static_cast<uint64_t>(starts));
        ++seen[s];
      }
      // Each start is drawn 3000 / starts times on average; within 25% at these counts.
      for (const int n : seen) CHECK(std::abs(n - 3000.0 / starts) < 0.25 * 3000.0 / starts);
    }
  }
  SUBCASE("chi-square over ten buckets of a 3000-start range") {
    const size_t starts = 3000;  // not a power of two: a biased bounded draw would show
    const TextCorpus corpus = sized_corpus(starts + window - 1);
    const TextWindows w(corpus, window, 1, 77, 1, 0);
    const uint64_t draws = 200000;
    std::vector<int> per_start(starts, 0);
    std::vector<double> bucket(10, 0.0);
    for (uint64_t k = 0; k < draws; ++k) {
      const uint64_t s = w.start(k);
      REQUIRE(s <= corpus.train.size() - window);
      ++per_start[s];
      bucket[s / (starts / 10)] += 1.0;
    }
    // Both ends and everything between are drawn (66.7 expected per start).
    CHECK(*std::min_element(per_start.begin(), per_start.end()) > 20);
    double chi2 = 0.0;
    const double expected = draws / 10.0;
    for (const double n : bucket) chi2 += (n - expected) * (n - expected) / expected;
    // 9 degrees of freedom: mean 9, P(chi2 > 40) < 1e-5.
    CHECK(chi2 < 40.0);
  }
}

TEST_CASE(
    "validation text windows are evenly spaced over the validation split, the same each run") {
  TempDir dir("text-validation");
  const fs::path file = dir.path() / "v.txt";
  std::string text(4000, '\0');  // byte i is i mod 256: a window's first byte gives its start
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i % 256);
  write_file(file, text);
  const TextCorpus corpus = load_text_corpus(file);
  REQUIRE(corpus.validation.size() == 200);  // bytes [3800, 4000)
  const size_t window = 17;

  auto starts_of = [&](const Batch& b) {
    std::vector<uint64_t> s;
    for (size_t i = 0; i < b.size; ++i) {
      // The window lies inside the validation split, byte for byte.
      const uint64_t at = (static_cast<uint64_t>(b.tokens[i * window]) + 256 - 3800 % 256) % 256;
      for (size_t t = 0; t < window; ++t)
        REQUIRE(b.tokens[i * window + t] == static_cast<int32_t>(corpus.validation[at + t]));
      s.push_back(at);
    }
    return s;
  };

  // Five windows: starts floor(i * 183 / 4); the last ends at the split's last byte.
  const Batch five = validation_windows(corpus, window, 5);
  CHECK(five.size == 5);
  CHECK(five.tokens.size() == 5 * window);
  CHECK(starts_of(five) == std::vector<uint64_t>{0, 45, 91, 137, 183});
  CHECK(validation_windows(corpus, window, 5).tokens == five.tokens);
  CHECK(starts_of(validation_windows(corpus, window, 1)) == std::vector<uint64_t>{0});
  // 20 windows of 17 bytes do not fit in 200 without overlap: floor(i * 183 / 19).
  const std::vector<uint64_t> twenty = starts_of(validation_windows(corpus, window, 20));
  REQUIRE(twenty.size() == 20);
  for (uint64_t i = 0; i < 20; ++i) CHECK(twenty[i] == i * 183 / 19);
}

TEST_CASE("the default text corpus is the King James Bible that scripts/bootstrap.sh installs") {
  const fs::path kjv = "/usr/local/share/geotrain/kjv.txt";
  REQUIRE_MESSAGE(fs::is_regular_file(kjv), "'", kjv.string(),
                  "' is missing: run scripts/bootstrap.sh to install the default text corpus");
  const TextCorpus corpus = load_text_corpus(kjv);
  CHECK(corpus.total_bytes() > 4'000'000);
  const std::string train = as_string(corpus.train);
  const size_t first = train.find_first_not_of(" \n");
  REQUIRE(first != std::string::npos);
  CHECK(train.compare(first, 10, "Genesis 1\n") == 0);
  CHECK(train.find("In the beginning God created the heaven and the earth.") < 200);
  // The end of Revelation falls in the last 5%, the validation split.
  CHECK(as_string(corpus.validation).find("The grace of our Lord Jesus Christ be with you all.") !=
        std::string::npos);
  const TextWindows windows(corpus, 257, 4, 0, 1, 0, corpus_name(kjv));
  CHECK(windows.batch(0).tokens.size() == 4 * 257);
}
