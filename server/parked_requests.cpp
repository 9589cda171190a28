#include "server/parked_requests.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace geotrain::server {

std::optional<std::string> ParkedRequests::park(
    wire::Envelope env, TimePoint now, const std::function<bool(const std::string&)>& registered) {
  const auto mine = std::count_if(requests_.begin(), requests_.end(),
                                  [&](const Request& p) { return p.envelope.peer == env.peer; });
  if (static_cast<size_t>(mine) >= per_peer_)
    return fmt::format("{} requests already wait at this server, limit {}", mine, per_peer_);
  if (!registered(env.peer)) {
    const auto open = std::count_if(requests_.begin(), requests_.end(),
                                    [&](const Request& p) { return !registered(p.envelope.peer); });
    if (static_cast<size_t>(open) >= kMaxParkedUnregistered)
      return fmt::format("{} requests of unregistered peers already wait at this server, limit {}",
                         open, kMaxParkedUnregistered);
  }
  requests_.push_back({std::move(env), now});
  return std::nullopt;
}

std::vector<ParkedRequests::Request> ParkedRequests::take_peer(const std::string& peer) {
  std::vector<Request> taken, keep;
  for (auto& p : requests_) (p.envelope.peer == peer ? taken : keep).push_back(std::move(p));
  requests_ = std::move(keep);
  return taken;
}

void ParkedRequests::retry(const std::function<bool(Request&)>& finished) {
  bool progress = true;
  while (progress && !requests_.empty()) {
    progress = false;
    for (size_t i = 0; i < requests_.size(); ++i) {
      Request p = std::move(requests_[i]);
      requests_.erase(requests_.begin() + static_cast<std::ptrdiff_t>(i));
      if (!finished(p)) {
        requests_.insert(requests_.begin() + static_cast<std::ptrdiff_t>(i), std::move(p));
      } else {
        progress = true;
        break;
      }
    }
  }
}

}  // namespace geotrain::server
