// AnsweredLedger: the request ids a server answered each registered region's connection last, so
// that its heartbeat reply can say them (wire::HeartbeatReply): a leader awaiting a reply the
// server says it sent, with none of it received, knows it was lost on the way (a connection that
// broke after the server queued it: a restarted netsim) and rejoins at once.
//
// Bounded: the newest kAnsweredKept ids a peer, and only registered regions' peers (the server
// forgets a peer when its region leaves, dies or joins again from another connection).
// Single-threaded: the server loop's thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace geotrain::server {

// Enough for every request a leader can have in flight at one server (a push and a pull per
// shard, wire::max_waiting_per_peer), with room; within wire::kMaxAnsweredIds.
inline constexpr size_t kAnsweredKept = 64;

class AnsweredLedger {
 public:
  void record(const std::string& peer, uint64_t request_id) {
    auto& ids = answered_[peer];
    ids.push_back(request_id);
    if (ids.size() > kAnsweredKept) ids.pop_front();
  }
  // Oldest first.
  std::vector<uint64_t> recent(const std::string& peer) const {
    const auto it = answered_.find(peer);
    if (it == answered_.end()) return {};
    return {it->second.begin(), it->second.end()};
  }
  void forget(const std::string& peer) { answered_.erase(peer); }

 private:
  std::map<std::string, std::deque<uint64_t>> answered_;
};

}  // namespace geotrain::server
