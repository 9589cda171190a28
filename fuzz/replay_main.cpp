// The replay driver: a main() for the fuzz targets where libFuzzer is not available (a build
// with g++, GEOTRAIN_FUZZ=REPLAY). It takes the command line the fuzz tests give libFuzzer,
//   fuzz_<target> [-runs=N] [-seed=S] [-max_total_time=T] [-max_len=L] [-other=...] PATH...
// feeds every file of each PATH (a file or a folder of files) to LLVMFuzzerTestOneInput once,
// then N inputs made from the corpus by deterministic mutations (seeded by S: the same command
// runs the same inputs), stopping early after T seconds. Other libFuzzer options are ignored.
// It has no coverage feedback and no sanitizers unless the build adds them; it catches what
// escapes a target: an exception other than InputError, an assertion, a failed fuzz check, a
// crash. On a crash it writes the input to <artifact_prefix>crash-replay (libFuzzer's
// -artifact_prefix option), so that it can be replayed alone and kept as a regression seed.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/splitmix64.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Input = std::vector<uint8_t>;

// What the crash handlers write out; set before each input runs.
const Input* g_current = nullptr;
std::string g_artifact;

void save_current() {
  if (g_current == nullptr || g_artifact.empty()) return;
  const int fd = ::open(g_artifact.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  const char* p = reinterpret_cast<const char*>(g_current->data());
  size_t left = g_current->size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n <= 0) break;
    p += n, left -= static_cast<size_t>(n);
  }
  ::close(fd);
  static const char kNote[] = "replay driver: crashing input written to the artifact path\n";
  (void)!::write(2, kNote, sizeof kNote - 1);
}

void on_signal(int sig) {
  save_current();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// splitmix64: a small, well-mixed, reproducible generator.
struct Rng {
  uint64_t state;
  uint64_t next() { return geotrain::splitmix64(state); }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
};

// One mutation of `in`, in the spirit of libFuzzer's: bit flips, interesting values in 1-8 byte
// fields, erased/inserted/duplicated ranges, a splice with another corpus input.
void mutate_once(Input& in, const std::vector<Input>& corpus, Rng& rng, size_t max_len) {
  static const uint64_t kInteresting[] = {
      0,          1,          2,      7,       8,          0x7f,       0x80,       0xff,
      0x100,      0x7fff,     0xffff, 0x10000, 0x7fffffff, 0x80000000, 0xffffffff, 0x100000000ull,
      1ull << 36, ~0ull >> 1, ~0ull};
  switch (rng.below(8)) {
    case 0:  // flip a bit
      if (!in.empty()) in[rng.below(in.size())] ^= static_cast<uint8_t>(1u << rng.below(8));
      return;
    case 1:  // a random byte
      if (!in.empty()) in[rng.below(in.size())] = static_cast<uint8_t>(rng.next());
      return;
    case 2: {  // an interesting little-endian value in a 1, 2, 4 or 8 byte field
      const size_t width = size_t{1} << rng.below(4);
      if (in.size() < width) return;
      const size_t at = rng.below(in.size() - width + 1);
      uint64_t v = kInteresting[rng.below(std::size(kInteresting))];
      if (rng.below(4) == 0) v = ~v + 1;  // and its negation
      for (size_t i = 0; i < width; ++i) in[at + i] = static_cast<uint8_t>(v >> (8 * i));
      return;
    }
    case 3: {  // erase a range
      if (in.empty()) return;
      const size_t at = rng.below(in.size());
      const size_t n = 1 + rng.below(std::min<size_t>(in.size() - at, 16));
      in.erase(in.begin() + static_cast<std::ptrdiff_t>(at),
               in.begin() + static_cast<std::ptrdiff_t>(at + n));
      return;
    }
    case 4: {  // insert random bytes
      const size_t at = rng.below(in.size() + 1);
      const size_t n = 1 + rng.below(8);
      Input bytes(n);
      for (auto& b : bytes) b = static_cast<uint8_t>(rng.next());
      in.insert(in.begin() + static_cast<std::ptrdiff_t>(at), bytes.begin(), bytes.end());
      break;
    }
    case 5: {  // copy a range over another place
      if (in.size() < 2) return;
      const size_t from = rng.below(in.size()), to = rng.below(in.size());
      const size_t n = 1 + rng.below(std::min(in.size() - from, in.size() - to));
      std::copy_n(Input(in.begin() + static_cast<std::ptrdiff_t>(from),
                        in.begin() + static_cast<std::ptrdiff_t>(from + n))
                      .begin(),
                  n, in.begin() + static_cast<std::ptrdiff_t>(to));
      return;
    }
    case 6: {  // splice: our head, another input's tail
      if (corpus.empty()) return;
      const Input& other = corpus[rng.below(corpus.size())];
      in.resize(rng.below(in.size() + 1));
      const size_t from = rng.below(other.size() + 1);
      in.insert(in.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
      break;
    }
    default:  // truncate
      in.resize(rng.below(in.size() + 1));
      return;
  }
  if (in.size() > max_len) in.resize(max_len);
}

Input read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Input(std::istreambuf_iterator<char>(f), {});
}

void run(const Input& in) {
  g_current = &in;
  LLVMFuzzerTestOneInput(in.data(), in.size());
  g_current = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t runs = 10000, seed = 1;
  double max_seconds = 0;
  size_t max_len = 4096;
  std::vector<std::filesystem::path> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      const std::string prefix = std::string("-") + name + "=";
      return arg.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("runs"))
      runs = std::strtoull(v, nullptr, 10);
    else if (const char* s = value("seed"))
      seed = std::strtoull(s, nullptr, 10);
    else if (const char* t = value("max_total_time"))
      max_seconds = std::strtod(t, nullptr);
    else if (const char* l = value("max_len"))
      max_len = std::strtoull(l, nullptr, 10);
    else if (const char* a = value("artifact_prefix"))
      g_artifact = std::string(a) + "crash-replay";
    else if (arg.rfind("-", 0) == 0)
      continue;  // other libFuzzer options
    else
      paths.emplace_back(arg);
  }
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) ::signal(sig, on_signal);
  std::set_terminate([] {
    save_current();
    std::fputs("replay driver: an exception escaped the fuzz target", stderr);
    try {
      if (auto e = std::current_exception()) std::rethrow_exception(e);
    } catch (const std::exception& e) {
      std::fprintf(stderr, ": %s: %s", typeid(e).name(), e.what());
    } catch (...) {
    }
    std::fputs("\n", stderr);
    std::abort();
  });

  std::vector<Input> corpus;
  for (const auto& p : paths) {
    if (std::filesystem::is_directory(p)) {
      std::vector<std::filesystem::path> files;
      for (const auto& e : std::filesystem::directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());  // the same order on every machine
      for (const auto& f : files) corpus.push_back(read_file(f));
    } else if (std::filesystem::is_regular_file(p)) {
      corpus.push_back(read_file(p));
    } else {
      std::fprintf(stderr, "replay driver: %s is neither a file nor a folder\n", p.c_str());
      return 2;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  for (const auto& in : corpus) run(in);
  std::fprintf(stderr, "replay driver: %zu corpus inputs replayed\n", corpus.size());

  Rng rng{seed};
  uint64_t done = 0;
  for (; done < runs; ++done) {
    if (max_seconds > 0 && (done & 63) == 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
            max_seconds)
      break;
    Input in = corpus.empty() ? Input{} : corpus[rng.below(corpus.size())];
    const size_t mutations = 1 + rng.below(4);
    for (size_t m = 0; m < mutations; ++m) mutate_once(in, corpus, rng, max_len);
    run(in);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "replay driver: %llu mutated inputs in %.1f s, no crash\n",
               static_cast<unsigned long long>(done), seconds);
  return 0;
}
