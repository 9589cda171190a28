#include "core/durable_file.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "core/error.hpp"

namespace geotrain {

namespace fs = std::filesystem;

namespace {
[[noreturn]] void fail_errno(const char* what, const fs::path& p) {
  throw SystemError("posix", what, __FILE__, __LINE__,
                    fmt::format("{}: {}", p.string(), std::strerror(errno)));
}
}  // namespace

namespace {

// Writes all of `bytes` to fd (the file at `path`); closes fd and throws on an error.
void write_all(int fd, std::string_view bytes, const fs::path& path) {
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
}

void sync_and_close(int fd, const fs::path& path) {
  if (::fsync(fd) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    fail_errno("fsync", path);
  }
  ::close(fd);
}

int create_file(const fs::path& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_errno("open", path);
  return fd;
}

}  // namespace

void write_file_synced(const fs::path& path, std::string_view bytes) {
  const int fd = create_file(path);
  write_all(fd, bytes, path);
  sync_and_close(fd, path);
}

uint64_t write_parts_synced(const fs::path& path, std::span<const std::string_view> parts) {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash(XXH3_createState(),
                                                                &XXH3_freeState);
  GT_ASSERT(hash != nullptr, "XXH3_createState failed");
  XXH3_64bits_reset(hash.get());
  const int fd = create_file(path);
  for (const auto part : parts) {
    XXH3_64bits_update(hash.get(), part.data(), part.size());
    write_all(fd, part, path);
  }
  sync_and_close(fd, path);
  return XXH3_64bits_digest(hash.get());
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
