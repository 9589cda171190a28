#include "wire/curve_keys.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cstring>
#include <fstream>
#include <set>
#include <system_error>

#include "core/error.hpp"

namespace geotrain::wire {

bool curve_supported() { return zmq_has("curve") != 0; }

CurveKeypair generate_keypair() {
  GT_REQUIRE(curve_supported(),
             "this libzmq was built without CURVE (libsodium): security.curve cannot be used");
  char pub[kZ85KeyChars + 1], sec[kZ85KeyChars + 1];
  GT_REQUIRE(zmq_curve_keypair(pub, sec) == 0, "zmq_curve_keypair failed: {}",
             zmq_strerror(zmq_errno()));
  return {std::string(pub, kZ85KeyChars), std::string(sec, kZ85KeyChars)};
}

void check_z85_key(std::string_view key, std::string_view what) {
  GT_REQUIRE(key.size() == kZ85KeyChars, "{}: a CURVE key is {} characters of Z85, not {}", what,
             kZ85KeyChars, key.size());
  uint8_t raw[32];
  const std::string text(key);
  GT_REQUIRE(zmq_z85_decode(raw, text.c_str()) != nullptr, "{}: not valid Z85 text", what);
}

std::string z85_to_binary(std::string_view key) {
  check_z85_key(key, "key");
  uint8_t raw[32];
  zmq_z85_decode(raw, std::string(key).c_str());
  return std::string(reinterpret_cast<const char*>(raw), sizeof raw);
}

std::string binary_to_z85(std::string_view bytes) {
  GT_REQUIRE(bytes.size() == 32, "a CURVE key is 32 bytes, not {}", bytes.size());
  char text[kZ85KeyChars + 1];
  zmq_z85_encode(text, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return std::string(text, kZ85KeyChars);
}

std::filesystem::path KeyDirectory::file(std::string_view role, std::string_view region,
                                         bool secret) const {
  return dir_ / fmt::format("{}-{}.{}", role, region, secret ? "secret" : "public");
}

std::string KeyDirectory::read_key(const std::filesystem::path& f) const {
  std::ifstream in(f);
  GT_REQUIRE(in.good(),
             "CURVE key file '{}' cannot be read (generate keys with `geotrain keygen --out {}`)",
             f.string(), dir_.string());
  std::string key;
  std::getline(in, key);
  while (!key.empty() && (key.back() == '\r' || key.back() == ' ')) key.pop_back();
  check_z85_key(key, f.string());
  return key;
}

CurveKeypair KeyDirectory::server_keypair(const std::string& region) const {
  return {read_key(file("server", region, false)), read_key(file("server", region, true))};
}
CurveKeypair KeyDirectory::client_keypair(const std::string& region) const {
  return {read_key(file("client", region, false)), read_key(file("client", region, true))};
}
std::string KeyDirectory::server_public(const std::string& region) const {
  return read_key(file("server", region, false));
}
std::string KeyDirectory::client_public(const std::string& region) const {
  return read_key(file("client", region, false));
}

namespace {
void write_key(const std::filesystem::path& f, const std::string& key, bool secret) {
  // O_EXCL after the caller's check: never follow a file created in between. Secret files are
  // created 0600 from the start, not chmod'ed afterwards.
  std::filesystem::remove(f);
  const int fd = ::open(f.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, secret ? 0600 : 0644);
  GT_REQUIRE(fd >= 0, "cannot create '{}': {}", f.string(), std::strerror(errno));
  const std::string line = key + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  GT_REQUIRE(ok, "cannot write '{}': {}", f.string(), std::strerror(errno));
}
}  // namespace

std::vector<std::filesystem::path> KeyDirectory::generate(const std::filesystem::path& dir,
                                                          const std::vector<std::string>& regions,
                                                          bool force) {
  GT_REQUIRE(!regions.empty(), "keygen: no regions given");
  std::set<std::string> seen;
  for (const auto& r : regions) {
    GT_REQUIRE(!r.empty() && r.find('/') == std::string::npos && r != "." && r != "..",
               "keygen: '{}' cannot name a region's key files", r);
    GT_REQUIRE(seen.insert(r).second, "keygen: region '{}' is named twice", r);
  }
  const KeyDirectory keys(dir);
  std::vector<std::filesystem::path> files;
  for (const auto& r : regions)
    for (const char* role : {"server", "client"})
      for (bool secret : {false, true}) files.push_back(keys.file(role, r, secret));
  if (!force)
    for (const auto& f : files)
      GT_REQUIRE(!std::filesystem::exists(f),
                 "keygen: '{}' exists; refusing to overwrite keys (use --force to replace them)",
                 f.string());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  GT_REQUIRE(!ec, "keygen: cannot create the key folder '{}': {}", dir.string(), ec.message());
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::add);
  for (const auto& r : regions)
    for (const char* role : {"server", "client"}) {
      const auto pair = generate_keypair();
      write_key(keys.file(role, r, false), pair.public_key, false);
      write_key(keys.file(role, r, true), pair.secret_key, true);
    }
  return files;
}

}  // namespace geotrain::wire
