#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "fuzz/fuzz_target.hpp"

namespace geotrain::fuzz {

namespace {
std::filesystem::path make_scratch_dir() {
  // Memory-backed when possible: some targets write files for every input.
  const char* tmpdir = std::getenv("TMPDIR");
  const std::filesystem::path base = tmpdir == nullptr && std::filesystem::is_directory("/dev/shm")
                                         ? std::filesystem::path("/dev/shm")
                                         : std::filesystem::temp_directory_path();
  std::string pattern = (base / "geotrain-fuzz-XXXXXX").string();
  GT_FUZZ_CHECK(::mkdtemp(pattern.data()) != nullptr, "mkdtemp failed");
  static const std::filesystem::path dir = pattern;
  std::atexit([] {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  });
  return dir;
}
}  // namespace

std::filesystem::path scratch_dir() {
  static const std::filesystem::path dir = make_scratch_dir();
  return dir;
}

void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  GT_FUZZ_CHECK(out.good(), path.c_str());
}

}  // namespace geotrain::fuzz
