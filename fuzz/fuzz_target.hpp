// What every fuzz target shares: the rule it enforces, and a reader that splits one fuzz input
// into fields.
//
// The rule (STYLE.md, principle 5): bad input must give a clear error, never a crash. A target
// feeds its input to one decoder or loader; the decoder may throw geotrain::InputError (the
// expected outcome of bad input), which the target swallows. Anything else is a finding:
// another exception escapes LLVMFuzzerTestOneInput (std::terminate, so libFuzzer and the replay
// driver both report a crash), GT_ASSERT aborts, or a sanitizer reports. Targets also check
// contracts the decoder states (e.g. "on error the output is unchanged") with GT_FUZZ_CHECK.
//
// Each target defines LLVMFuzzerTestOneInput and, when it needs one-time setup (a temporary
// folder), does it lazily on the first call: libFuzzer's LLVMFuzzerInitialize is not needed.
// Targets are single-threaded and keep no state between inputs beyond such setup.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error_types.hpp"

// A contract of the code under test, broken by this input: print and abort (a crash for
// libFuzzer, which then saves the input).
#define GT_FUZZ_CHECK(cond, what)                                                              \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "fuzz check failed at %s:%d: %s (%s)\n", __FILE__, __LINE__, #cond, \
                   what);                                                                      \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

namespace geotrain::fuzz {

// Reads an input front to back. Reads past the end give zeros and empty spans, so every input,
// however short, is a valid sequence of fields (like LLVM's FuzzedDataProvider, without its
// header, so that the replay drivers build with any compiler).
class InputReader {
 public:
  InputReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  // The next n bytes (fewer at the end).
  std::span<const uint8_t> take(size_t n) {
    n = std::min(n, size_ - pos_);
    std::span<const uint8_t> out(data_ + pos_, n);
    pos_ += n;
    return out;
  }
  std::span<const uint8_t> rest() { return take(size_ - pos_); }
  size_t remaining() const { return size_ - pos_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Runs f(); true when it returned, false when it threw InputError. Other exceptions escape.
template <typename F>
bool accepts(F&& f) {
  try {
    f();
    return true;
  } catch (const InputError&) {
    return false;
  }
}

// Splits `text` at every occurrence of `separator`.
inline std::vector<std::string_view> split(std::string_view text, std::string_view separator) {
  std::vector<std::string_view> parts;
  for (;;) {
    const size_t at = text.find(separator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + separator.size());
  }
}

// A fresh folder for this process's files (under TMPDIR, else /dev/shm), made on first use and
// removed at exit.
std::filesystem::path scratch_dir();

// Writes `bytes` to `path`, replacing it; a failure is our bug (abort), not the input's.
void write_file(const std::filesystem::path& path, std::string_view bytes);

}  // namespace geotrain::fuzz
