#include "core/durable_file.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/error.hpp"

namespace geotrain {

namespace fs = std::filesystem;

namespace {
[[noreturn]] void fail_errno(const char* what, const fs::path& p) {
  throw SystemError("posix", what, __FILE__, __LINE__,
                    fmt::format("{}: {}", p.string(), std::strerror(errno)));
}
}  // namespace

void write_file_synced(const fs::path& path, std::string_view bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_errno("open", path);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      fail_errno("write", path);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    fail_errno("fsync", path);
  }
  ::close(fd);
}

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail_errno("open dir", dir);
  ::fsync(fd);
  ::close(fd);
}

void commit_folder(const fs::path& tmp_dir, const fs::path& final_dir) {
  fsync_dir(tmp_dir);
  fs::remove_all(final_dir);
  fs::rename(tmp_dir, final_dir);
  fsync_dir(final_dir.parent_path());
}

std::string read_binary_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  GT_REQUIRE(in.good(), "file '{}' cannot be read", path.string());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

uint64_t checksum_xxh3(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

}  // namespace geotrain
