#include "server/rendezvous_store.hpp"

#include <fmt/format.h>

#include <variant>

namespace geotrain::server {

using wire::ErrorCode;
using wire::WireError;

namespace {
// `what`: the request's name as wire::body_name() gives it.
void require_no_payload(const char* what, std::span<const wire::Frame> payloads,
                        uint64_t request_id) {
  if (!payloads.empty())
    throw WireError(ErrorCode::malformed,
                    fmt::format("{} carries payload frames, expected none", what), request_id);
}
}  // namespace

bool RendezvousStore::handles(const wire::Body& body) {
  return std::holds_alternative<wire::KvSet>(body) || std::holds_alternative<wire::KvGet>(body) ||
         std::holds_alternative<wire::KvTryGet>(body);
}

void RendezvousStore::set(const wire::KvSet& m, std::span<const wire::Frame> payloads,
                          uint64_t request_id) {
  require_no_payload("kvSet", payloads, request_id);
  if (m.key.empty() || m.key.size() > kMaxKvKeyBytes || m.value.size() > kMaxKvValueBytes)
    throw WireError(ErrorCode::too_large,
                    fmt::format("kvSet key of {} bytes / value of {} bytes: limits are 1-{} / {}",
                                m.key.size(), m.value.size(), kMaxKvKeyBytes, kMaxKvValueBytes),
                    request_id);
  if (!entries_.count(m.key) && entries_.size() >= kMaxKvEntries)
    throw WireError(ErrorCode::too_large,
                    fmt::format("key-value store is full ({} keys)", kMaxKvEntries), request_id);
  entries_[m.key] = m.value;
}

std::optional<Bytes> RendezvousStore::get(const wire::KvGet& m,
                                          std::span<const wire::Frame> payloads,
                                          uint64_t request_id) const {
  return find(m.key, "kvGet", payloads, request_id);
}

std::optional<Bytes> RendezvousStore::get(const wire::KvTryGet& m,
                                          std::span<const wire::Frame> payloads,
                                          uint64_t request_id) const {
  return find(m.key, "kvTryGet", payloads, request_id);
}

std::optional<Bytes> RendezvousStore::find(const std::string& key, const char* what,
                                           std::span<const wire::Frame> payloads,
                                           uint64_t request_id) const {
  require_no_payload(what, payloads, request_id);
  if (key.empty() || key.size() > kMaxKvKeyBytes)
    throw WireError(
        ErrorCode::too_large,
        fmt::format("{} key of {} bytes: limits are 1-{}", what, key.size(), kMaxKvKeyBytes),
        request_id);
  const auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

}  // namespace geotrain::server
