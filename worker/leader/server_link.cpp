#include "worker/leader/server_link.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/error.hpp"

namespace geotrain::worker {

std::unique_ptr<wire::Client> open_server_client(wire::Context& context,
                                                 const ServerAddress& server, uint32_t streams,
                                                 int socket_buffer_bytes) {
  wire::ChannelOptions options;
  options.curve_client = server.curve;
  options.lanes = streams;
  options.socket_buffer_bytes = socket_buffer_bytes;
  return std::make_unique<wire::Client>(wire::connect_dealer(context, server.endpoint, options));
}

uint32_t choose_streams(wire::Context& context, const ServerAddress& server,
                        const std::string& ours, double link_mbps, int socket_buffer_bytes,
                        std::chrono::milliseconds timeout, const ReplyWait& how) {
  // Heartbeats on a throwaway connection: the first waits for the server to come up (and carries
  // the connection's handshakes), the next two time the round trip. A server that does not know
  // this region answers `unregistered`: an answer all the same.
  auto probe = open_server_client(context, server, 1, socket_buffer_bytes);
  double rtt = 1e9;
  for (int i = 0; i < 3; ++i) {
    const auto id = probe->send(wire::Heartbeat{});
    GT_REQUIRE(id.has_value(), "server of region {}: send queue full", server.region);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      collect(*probe, server.region, {*id}, timeout, "round-trip probe", how);
    } catch (const ServerLost&) {
    }
    if (i > 0) rtt = std::min(rtt, seconds_since(t0));
  }
  const double window = wire::tcp_window_bytes(socket_buffer_bytes);
  const uint32_t n = wire::streams_for_link(rtt, link_mbps, window);
  spdlog::info(
      "region {}: server of region {}: round trip {:.1f} ms, {} connection(s) (auto: {} "
      "Mbit/s x RTT / {:.0f} KiB window)",
      ours, server.region, rtt * 1e3, n, link_mbps, window / 1024);
  return n;
}

uint64_t ServerLink::send(wire::Body body, std::vector<wire::Frame> frames) {
  auto id = client_->send(std::move(body), std::move(frames));
  GT_REQUIRE(id.has_value(), "server of region {}: send queue full", region_);
  return *id;
}

void ServerLink::heartbeat_if_quiet(std::chrono::milliseconds period) {
  if (lost_ || !quiet_for(period)) return;
  if (client_->send(wire::Heartbeat{})) heard_from();
}

std::map<uint64_t, wire::Reply> ServerLink::collect(const std::vector<uint64_t>& ids,
                                                    std::chrono::milliseconds timeout,
                                                    const char* what, ReplyWait how) {
  how.parked_ids.insert(how.parked_ids.end(), in_flight_.begin(), in_flight_.end());
  if (probe_) how.parked_ids.push_back(*probe_);
  how.parked = &parked_;
  how.disconnects_seen = seen_disconnects_;
  if (other_ && joined_) {
    how.silent_lost = takeover_after_;
    how.last_answer = &last_answer_;
  }
  auto replies = worker::collect(*client_, region_, ids, timeout, what, how);
  if (!replies.empty()) heard_from();
  return replies;
}

std::map<uint64_t, wire::Reply> ServerLink::collect_in_flight(const std::vector<uint64_t>& ids,
                                                              std::chrono::milliseconds wait,
                                                              std::chrono::milliseconds heartbeat,
                                                              ReplyWait how) {
  const auto now = Clock::now();
  if (quiet_for(heartbeat) && (!probe_ || now - probe_sent_ >= heartbeat)) {
    probe_ = client_->send(wire::Heartbeat{});
    probe_sent_ = now;
  }
  std::vector<uint64_t> asked = ids;
  if (probe_) asked.push_back(*probe_);
  how.partial = true;
  auto replies = collect(asked, std::min(wait, heartbeat), "deferred push and pull", how);
  if (probe_ && replies.erase(*probe_)) probe_.reset();
  for (const auto& [id, _] : replies) in_flight_.erase(id);
  return replies;
}

std::set<uint64_t> ServerLink::look_in_flight(const std::vector<uint64_t>& ids,
                                              std::chrono::milliseconds heartbeat, ReplyWait how) {
  std::set<uint64_t> answered;
  for (auto& [id, reply] :
       collect_in_flight(ids, std::chrono::milliseconds(0), heartbeat, std::move(how))) {
    answered.insert(id);
    in_flight_.insert(id);
    parked_.emplace(id, std::move(reply));
  }
  return answered;
}

void ServerLink::lose() {
  if (!lost_) hellos_sent_.clear();
  lost_ = true;
  in_flight_.clear();
  parked_.clear();
  probe_.reset();
}

wire::HelloReply ServerLink::rejoin(const wire::Hello& hello, std::chrono::milliseconds timeout,
                                    std::chrono::milliseconds heartbeat,
                                    const std::function<void()>& while_waiting,
                                    std::stop_token stop) {
  auto reply = try_rejoin(hello, timeout, heartbeat, while_waiting, std::move(stop));
  if (!reply)
    throw SystemError("wire", "hello (rejoin)", __FILE__, __LINE__,
                      fmt::format("region {}: the server of region {} did not answer a hello "
                                  "within {} ms",
                                  hello.region, region_, timeout.count()));
  return std::move(*reply);
}

std::optional<wire::HelloReply> ServerLink::try_rejoin(const wire::Hello& hello,
                                                       std::chrono::milliseconds timeout,
                                                       std::chrono::milliseconds heartbeat,
                                                       const std::function<void()>& while_waiting,
                                                       std::stop_token stop) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + timeout;
  // The hellos of earlier tries count too: over a link slower than one try's wait, the answer to
  // one of them comes during a later one.
  auto& ids = hellos_sent_;
  std::optional<wire::Reply> answer;
  bool from_other = false;  // standby shards: the other connection answered
  // An answer to one of our hellos on `client` (a standby's not_serving is none: it waits on).
  const auto look = [](wire::Client& client, const std::vector<uint64_t>& sent,
                       std::chrono::milliseconds wait) -> std::optional<wire::Reply> {
    auto reply = client.receive(wait);
    if (!reply || std::find(sent.begin(), sent.end(), reply->header.request_id) == sent.end())
      return std::nullopt;
    const auto* e = std::get_if<wire::Error>(&reply->header.body);
    if (e && e->code == wire::ErrorCode::not_serving) return std::nullopt;
    return reply;
  };
  // At least one hello sent and one look for an answer, however short the timeout.
  bool looked = false;
  for (auto next_send = t0; !answer; looked = true) {
    const auto now = Clock::now();
    if (stop.stop_requested() && now - t0 >= kStopGrace)
      throw Stopped(fmt::format("stopped while rejoining the server of region {}", region_));
    if (now >= deadline && looked) return std::nullopt;
    if (now >= next_send) {
      if (auto id = client_->send(hello)) ids.push_back(*id);
      if (other_)
        if (auto id = other_->send(hello)) other_hellos_.push_back(*id);
      if (while_waiting) while_waiting();
      next_send = now + heartbeat;
    }
    auto until = std::min(next_send, deadline);
    if (stop.stop_possible()) until = std::min(until, now + std::chrono::milliseconds(100));
    // With a standby, both connections are looked at in turns.
    if (other_) until = std::min(until, now + std::chrono::milliseconds(10));
    answer = look(*client_, ids,
                  std::max(std::chrono::duration_cast<std::chrono::milliseconds>(until - now),
                           std::chrono::milliseconds(1)));
    if (!answer && other_) {
      answer = look(*other_, other_hellos_, std::chrono::milliseconds(0));
      from_other = answer.has_value();
    }
  }
  if (from_other) {
    std::swap(client_, other_);
    std::swap(ids, other_hellos_);
    on_standby_ = !on_standby_;
    spdlog::warn("region {}: the shards of region {}'s server are served by its {} now",
                 hello.region, region_, on_standby_ ? "standby" : "primary");
  }
  other_hellos_.clear();
  if (auto* e = std::get_if<wire::Error>(&answer->header.body))
    throw InputError(fmt::format("region {}: the server of region {} refused the hello: {} ({})",
                                 hello.region, region_, e->message,
                                 wire::error_code_name(e->code)));
  auto reply = body_as<wire::HelloReply>(*answer, region_);
  ids.clear();
  lost_ = false;
  // Registered again over the connections as they are now: what broke before is accounted for.
  seen_disconnects_ = client_->channel().breaks();
  heard_from();
  last_answer_ = Clock::now();
  joined_ = true;
  return reply;
}

}  // namespace geotrain::worker
