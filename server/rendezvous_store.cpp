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
  return std::holds_alternative<wire::KvSet>(body) || std::holds_alternative<wire::KvGet>(body);
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
  require_no_payload("kvGet", payloads, request_id);
  if (m.key.empty() || m.key.size() > kMaxKvKeyBytes)
    throw WireError(
        ErrorCode::too_large,
        fmt::format("kvGet key of {} bytes: limits are 1-{}", m.key.size(), kMaxKvKeyBytes),
        request_id);
  const auto it = entries_.find(m.key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

}  // namespace geotrain::server
