// ParamServer's dealings with who is there (server/membership.hpp keeps the record): a region's
// hello (joining, or joining again from another connection), the sweep that declares silent
// regions dead and drops what they had waiting, and the server's own stalls, which must not count
// as the regions' silence. The rest of the loop is in param_server.cpp.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

#include "core/error.hpp"
#include "server/param_server.hpp"

namespace geotrain::server {

using wire::ErrorCode;
using wire::WireError;

void ParamServer::on_hello(const std::string& peer, const wire::Header& h, const wire::Hello& m) {
  if (m.protocol_version != wire::kProtocolVersion)
    throw WireError(ErrorCode::bad_version,
                    fmt::format("hello.protocolVersion is {}, this server speaks {}",
                                m.protocol_version, wire::kProtocolVersion),
                    h.request_id);
  if (m.table_hash != table_.layout_hash())
    throw WireError(ErrorCode::bad_table_hash,
                    fmt::format("hello.tableHash is {:#x}, this server's parameter table is {:#x}",
                                m.table_hash, table_.layout_hash()),
                    h.request_id);
  uint32_t r = 0;
  try {
    r = config_.region_index(m.region);
  } catch (const InputError& e) {
    throw WireError(ErrorCode::unknown_region, fmt::format("hello.region: {}", e.what()),
                    h.request_id);
  }
  Membership::Joined joined;
  try {
    joined = membership_.join(peer, r, options_.clock());
  } catch (const InputError& e) {
    throw WireError(ErrorCode::malformed, e.what(), h.request_id);
  }
  if (joined.old_peer) {
    (void)parked_.take_peer(*joined.old_peer);  // the old connection's: never answered
    answered_.forget(*joined.old_peer);
  }
  const bool rejoin = joined.rejoined || metrics_.region(r).pushes > 0;
  for (auto& s : shards_) s.rejoin(r);
  spdlog::info("membership: region {} {}", m.region, rejoin ? "rejoined" : "joined");
  metrics_.event("membership", {{"region", m.region}, {"change", rejoin ? "rejoined" : "joined"}});
  wire::HelloReply out{config_.regions[region_],
                       {},
                       1,
                       static_cast<uint32_t>(config_.heartbeat.count()),
                       {"ef-downlink", "full-pull", "kv", "zero-start", "flush"}};
  uint64_t next = UINT64_MAX;
  for (auto& s : shards_) {
    out.shards.push_back({s.range().id, s.range().offset, s.range().count,
                          s.start_downlink_from_zero(r), s.range().fragment, s.flushed(r),
                          s.gate().clock(r) + 1});
    next = std::min(next, s.released_round() + 1);
  }
  out.next_round = shards_.empty() ? 1 : next;
  out.fragments = config_.fragments;
  out.critical_fragment = config_.fragments > 1 && !config_.stream_critical;
  reply(peer, h.request_id, std::move(out));
}

void ParamServer::forget_parked(const std::string& peer, const std::string& why) {
  // One refusal per request it had waiting (a refusal names no request: id 0).
  const size_t waiting = parked_.take_peer(peer).size();
  for (size_t i = 0; i < waiting; ++i) reply_error(peer, 0, ErrorCode::unregistered, why);
  answered_.forget(peer);
}

bool ParamServer::sweep() {
  if (!serving_) return false;  // a standby counts nobody until it serves
  const auto deaths = membership_.expire(options_.clock());
  for (const auto& d : deaths) {
    const auto& name = config_.regions[d.region];
    if (d.peer) forget_parked(*d.peer, fmt::format("region {} was marked dead", name));
    spdlog::warn("membership: region {} marked dead ({})", name, d.why);
    metrics_.event("membership", {{"region", name}, {"change", "dead"}, {"why", d.why}});
  }
  if (!deaths.empty()) release_rounds();
  return !deaths.empty();
}

uint32_t ParamServer::longest_silence_ms(const std::vector<size_t>& regions) const {
  const auto now = options_.clock();
  std::chrono::milliseconds longest{0};
  for (const size_t r : regions)
    longest = std::max(longest, std::chrono::duration_cast<std::chrono::milliseconds>(
                                    now - membership_.last_seen(static_cast<uint32_t>(r))));
  return static_cast<uint32_t>(
      std::min<int64_t>(longest.count(), std::numeric_limits<uint32_t>::max()));
}

void ParamServer::excuse_own_stall(std::chrono::steady_clock::time_point waited_from,
                                   std::chrono::milliseconds timeout, const char* what) {
  const auto now = std::chrono::steady_clock::now();
  const auto since = last_receive_end_.value_or(waited_from);
  last_receive_end_ = now;
  // The previous message's work, this tick's sweep and the wait in receive, beyond the wait asked
  // for: the regions' messages of that time sat unread in the socket.
  const auto stalled = std::chrono::duration_cast<std::chrono::milliseconds>(now - since - timeout);
  after_stall(stalled);
  if (options_.excuse_stalls_over.count() <= 0 || stalled <= options_.excuse_stalls_over) return;
  membership_.excuse(stalled, options_.clock());
  spdlog::warn(
      "server {} for {:.1f} s (stopped, starved of CPU, or a long piece of work): the regions' "
      "silence in that time is not counted towards server.dead_after_ms",
      what, static_cast<double>(stalled.count()) / 1000.0);
  metrics_.event("stall", {{"seconds", static_cast<double>(stalled.count()) / 1000.0}});
}

}  // namespace geotrain::server
