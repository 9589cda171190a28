#include "worker/leader/reply_wait.hpp"

#include <algorithm>

namespace geotrain::worker {

using Clock = std::chrono::steady_clock;

namespace {
// The awaited ids that the server says it answered, though their replies are not here.
std::vector<uint64_t> answered_not_received(const std::vector<uint64_t>& ids,
                                            const std::map<uint64_t, wire::Reply>& replies,
                                            const wire::HeartbeatReply& heartbeat) {
  std::vector<uint64_t> out;
  for (const uint64_t id : ids)
    if (!replies.count(id) && std::find(heartbeat.answered.begin(), heartbeat.answered.end(), id) !=
                                  heartbeat.answered.end())
      out.push_back(id);
  return out;
}

// An answer to one of the awaited requests that is an error: a lost place (ServerLost: the
// server does not count this region, or counts its rounds otherwise than we do: a leader
// restarted between its pushes of one round, or a reply lost; a rejoin, a hello, a full pull and
// the rounds mapped again, finds it again), or a refusal (InputError naming `what`).
void check_answer(const wire::Reply& reply, const std::string& region, const char* what) {
  const auto* e = std::get_if<wire::Error>(&reply.header.body);
  if (!e) return;
  if (e->code == wire::ErrorCode::unregistered)
    throw ServerLost(
        fmt::format("server of region {} answered {} with: {}", region, what, e->message));
  if (e->code == wire::ErrorCode::bad_round)
    throw ServerLost(fmt::format("server of region {} refused {}: {} (badRound): rejoining it",
                                 region, what, e->message));
  throw InputError(fmt::format("server of region {} refused {}: {} ({})", region, what, e->message,
                               wire::error_code_name(e->code)));
}
}  // namespace

std::map<uint64_t, wire::Reply> collect(wire::Client& client, const std::string& region,
                                        const std::vector<uint64_t>& ids,
                                        std::chrono::milliseconds timeout, const char* what,
                                        const ReplyWait& waiting) {
  std::map<uint64_t, wire::Reply> replies;
  if (waiting.parked)
    for (uint64_t id : ids)
      if (auto it = waiting.parked->find(id); it != waiting.parked->end()) {
        auto reply = std::move(it->second);
        waiting.parked->erase(it);
        check_answer(reply, region, what);  // parked while another wait ran: unchecked so far
        replies.emplace(id, std::move(reply));
      }
  auto contains = [](const std::vector<uint64_t>& v, uint64_t id) {
    return std::find(v.begin(), v.end(), id) != v.end();
  };
  std::vector<uint64_t> probes;
  // Heartbeat replies in a row that said the server answered a request whose reply is not here
  // (and none is partly here): two, a probe apart, and the reply was lost on the way.
  int lost_strikes = 0;
  const auto probe = waiting.probe;
  const auto started = Clock::now();
  auto deadline = started + timeout;
  auto quiet_since = started;
  constexpr std::chrono::milliseconds kStopPoll{100};
  while (replies.size() < ids.size()) {
    if (waiting.disconnects_seen && client.channel().breaks() > *waiting.disconnects_seen)
      throw ServerLost(fmt::format(
          "the connection to the server of region {} broke, or a message from it was lost on a "
          "striped lane, while {} of {} replies to {} were awaited (a reset, a restarted netsim, "
          "or a lane not reconnected to a restarted server): they may be lost",
          region, ids.size() - replies.size(), ids.size(), what));
    const auto now = Clock::now();
    if (waiting.silent_lost.count() > 0 && waiting.last_answer &&
        now - *waiting.last_answer >= waiting.silent_lost)
      throw ServerLost(fmt::format(
          "the server of region {} has answered nothing for {} ms (server.standby."
          "takeover_after_ms) while {} of {} replies to {} were awaited: its standby takes over",
          region,
          std::chrono::duration_cast<std::chrono::milliseconds>(now - *waiting.last_answer).count(),
          ids.size() - replies.size(), ids.size(), what));
    if (waiting.stop.stop_requested() && now - started >= kStopGrace)
      throw Stopped(
          fmt::format("stopped while waiting {} ms for {} of {} replies to {} from the "
                      "server of region {}",
                      std::chrono::duration_cast<std::chrono::milliseconds>(now - started).count(),
                      ids.size() - replies.size(), ids.size(), what, region));
    // Partial: past the timeout, take what has come already, without waiting.
    const bool late = now >= deadline;
    if (late && !waiting.partial)
      throw SystemError(
          "wire", what, __FILE__, __LINE__,
          waiting.while_answered
              ? fmt::format("server of region {} sent {} of {} replies and was silent for {} ms",
                            region, replies.size(), ids.size(), timeout.count())
              : fmt::format("server of region {} sent {} of {} replies within {} ms", region,
                            replies.size(), ids.size(), timeout.count()));
    auto until = deadline;
    if (waiting.silent_lost.count() > 0 && waiting.last_answer)
      until = std::min(until, *waiting.last_answer + waiting.silent_lost);
    if (probe.count() > 0 && !late) {
      if (now - quiet_since >= probe) {
        if (auto id = client.send(wire::Heartbeat{})) probes.push_back(*id);
        if (waiting.on_probe) waiting.on_probe();
        quiet_since = now;
      }
      until = std::min(until, quiet_since + probe);
    }
    if (waiting.stop.stop_possible()) until = std::min(until, now + kStopPoll);
    auto reply = client.receive(
        late ? std::chrono::milliseconds(0)
             : std::max(std::chrono::duration_cast<std::chrono::milliseconds>(until - now),
                        std::chrono::milliseconds(1)));
    if (!reply && late) break;
    if (!reply) continue;
    if (waiting.last_answer) *waiting.last_answer = Clock::now();
    const uint64_t id = reply->header.request_id;
    const bool ours = contains(ids, id);
    const bool probed = contains(probes, id);
    const bool parked = !ours && waiting.parked && contains(waiting.parked_ids, id);
    const auto* e = std::get_if<wire::Error>(&reply->header.body);
    // Id 0: the server dropped our waiting requests (it declared the region dead).
    if (e && e->code == wire::ErrorCode::unregistered && (ours || probed || parked || id == 0))
      throw ServerLost(fmt::format("server of region {} answered {} with: {}", region,
                                   probed ? "a heartbeat" : what, e->message));
    if (parked) {
      waiting.parked->emplace(id, std::move(*reply));
      continue;
    }
    if (!ours && !probed) continue;  // a reply we gave up on
    quiet_since = Clock::now();
    if (probed) {
      if (waiting.while_answered) deadline = quiet_since + timeout;
      if (const auto* hb = std::get_if<wire::HeartbeatReply>(&reply->header.body)) {
        const auto lost = answered_not_received(ids, replies, *hb);
        lost_strikes = lost.empty() || client.channel().receiving() ? 0 : lost_strikes + 1;
        if (lost_strikes >= 2)
          throw ServerLost(fmt::format(
              "the server of region {} answered {} of the {} requests of {} awaited (request "
              "{}), but no reply came: lost on the way (a connection that broke after the "
              "server sent it)",
              region, lost.size(), ids.size() - replies.size(), what, lost.front()));
      }
      continue;
    }
    check_answer(*reply, region, what);
    replies.emplace(id, std::move(*reply));
  }
  return replies;
}

}  // namespace geotrain::worker
