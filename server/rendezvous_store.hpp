// RendezvousStore: the servers' key-value exchange (kvSet / kvGet), through which a region's
// workers meet before they train: Gloo's addresses, the NCCL unique id. It is open to every peer,
// registered or not (only a region's leader registers), so it is bounded: keys of 1 to
// kMaxKvKeyBytes bytes, values of at most kMaxKvValueBytes, at most kMaxKvEntries keys. A get of
// a key nobody has set yet waits (the server parks it and asks again after every change); a
// kvTryGet does not (answered with ack while the key is not set).
//
// Requests that break a limit throw WireError (`too_large`, `malformed`) naming the limit, and
// change nothing. Single-threaded: the server loop's thread only.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "core/span.hpp"
#include "wire/messages.hpp"

namespace geotrain::server {

inline constexpr size_t kMaxKvEntries = 4096;
inline constexpr size_t kMaxKvKeyBytes = 256;
inline constexpr size_t kMaxKvValueBytes = size_t{64} << 10;
// Frame 0 of a kvSet or kvGet: a key and a value with room for the Cap'n Proto framing.
inline constexpr size_t kMaxKvFrameBytes = kMaxKvValueBytes + kMaxKvKeyBytes + 1024;

class RendezvousStore {
 public:
  // Whether a request is the store's (a kvSet, kvGet or kvTryGet).
  static bool handles(const wire::Body& body);

  // Sets (or replaces) the key. `payloads`: the request's frames after the header (none allowed).
  void set(const wire::KvSet& m, std::span<const wire::Frame> payloads, uint64_t request_id);
  // The key's value; empty while nobody has set it (the caller parks the request).
  std::optional<Bytes> get(const wire::KvGet& m, std::span<const wire::Frame> payloads,
                           uint64_t request_id) const;
  std::optional<Bytes> get(const wire::KvTryGet& m, std::span<const wire::Frame> payloads,
                           uint64_t request_id) const;

  size_t size() const { return entries_.size(); }

 private:
  std::optional<Bytes> find(const std::string& key, const char* what,
                            std::span<const wire::Frame> payloads, uint64_t request_id) const;

  std::map<std::string, Bytes> entries_;
};

}  // namespace geotrain::server
