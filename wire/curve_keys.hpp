// CURVE keys (libzmq's CurveZMQ, zmq_curve(7)) and the folder they live in.
//
// A key is 40 characters of Z85 text (32 bytes of Curve25519 key). A deployment has, per
// region, one *server* keypair (its server socket's identity) and one *client* keypair (what
// the region's leader and workers present to every server). The folder (`security.keys_dir`,
// written by `geotrain keygen`) holds one file per key, each one line of Z85 text:
//
//   server-<region>.public   server-<region>.secret   (mode 0600)
//   client-<region>.public   client-<region>.secret   (mode 0600)
//
// A server needs its own server-<region>.secret and every client-*.public (its allow-list); a
// region's workers need their client-<region>.{public,secret} and every server-*.public. Files
// are read when asked for, so a machine holds only the secrets it uses (docs/deploy.md).
//
// Plain functions and a value type; no threads. Every file or key problem is an InputError
// naming the file and what is wrong.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace geotrain::wire {

inline constexpr size_t kZ85KeyChars = 40;

struct CurveKeypair {
  std::string public_key;  // Z85
  std::string secret_key;  // Z85
};

// Whether the linked libzmq was built with CURVE (libsodium): zmq_has("curve").
bool curve_supported();
// A fresh keypair (zmq_curve_keypair). InputError when libzmq has no CURVE.
CurveKeypair generate_keypair();
// InputError naming `what` unless `key` is 40 characters of valid Z85.
void check_z85_key(std::string_view key, std::string_view what);
// The 32 raw bytes of a Z85 key, and back (for ZAP credentials, which are raw bytes).
std::string z85_to_binary(std::string_view key);
std::string binary_to_z85(std::string_view bytes);

class KeyDirectory {
 public:
  explicit KeyDirectory(std::filesystem::path dir) : dir_(std::move(dir)) {}
  const std::filesystem::path& dir() const { return dir_; }

  std::filesystem::path file(std::string_view role, std::string_view region, bool secret) const;
  CurveKeypair server_keypair(const std::string& region) const;
  CurveKeypair client_keypair(const std::string& region) const;
  std::string server_public(const std::string& region) const;
  std::string client_public(const std::string& region) const;

  // Writes a server and a client keypair for every region (secret files mode 0600). Refuses,
  // before writing anything, when a file it would write exists, unless `force`.
  // Returns the files written.
  static std::vector<std::filesystem::path> generate(const std::filesystem::path& dir,
                                                     const std::vector<std::string>& regions,
                                                     bool force);

 private:
  std::string read_key(const std::filesystem::path& file) const;
  std::filesystem::path dir_;
};

}  // namespace geotrain::wire
