// TempDir: a fresh, empty folder under the system temp directory, named
// geotrain-test-<name>-<pid>-<n>, removed with everything in it when the TempDir goes out of
// scope. Declare it before anything that writes into it (servers, checkpoint stores), so those
// are gone before the folder is removed. Not copyable; not thread-safe beyond its own counter.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <system_error>

namespace geotrain::test {

class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            fmt::format("geotrain-test-{}-{}-{}", name, ::getpid(), counter++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;  // a destructor must not throw; a leftover folder is harmless
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace geotrain::test
