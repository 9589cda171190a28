#include "wire/striped_channel.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "core/check_zmq.hpp"
#include "core/error.hpp"
#include "wire/messages.hpp"

namespace geotrain::wire {

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kStripedTag = static_cast<char>(0xFE);
constexpr size_t kSessionBytes = 9;  // the tag and 8 random bytes

uint64_t random_id() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (uint64_t{rd()} << 32) ^ rd();
  return v;
}

std::string lane_id(const std::string& session, uint16_t lane) {
  return session + static_cast<char>(lane);
}

bool is_session(const std::string& peer) {
  return peer.size() == kSessionBytes && peer[0] == kStripedTag;
}
bool is_lane(const std::string& peer) {
  return peer.size() == kSessionBytes + 1 && peer[0] == kStripedTag;
}

ReassemblyLimits limits_of(const ChannelOptions& o) {
  ReassemblyLimits l;
  l.max_frame_bytes = static_cast<uint64_t>(std::max<int64_t>(o.max_frame_bytes, 0));
  l.max_frames = o.max_frames;
  l.max_partial_bytes = 4 * l.max_frame_bytes;
  return l;
}

// A chunk's piece (empty for a tick or an abort), after checking the chunk has the frames its
// kind needs. WireError otherwise.
Frame piece_of(const ChunkHeader& h, Envelope& chunk) {
  const size_t want = h.kind == ChunkKind::data ? 2 : 1;
  if (chunk.frames.size() != want)
    throw WireError(ErrorCode::malformed, fmt::format("stripe chunk with {} frames, {} expected",
                                                      chunk.frames.size(), want));
  return want == 2 ? std::move(chunk.frames[1]) : Frame();
}

// Lanes queue chunks, not messages: a message is a few chunks per lane.
ChannelOptions lane_options(ChannelOptions o, const std::string& session, uint16_t lane) {
  o.routing_id = lane_id(session, lane);
  o.send_hwm *= 4;
  o.receive_hwm *= 4;
  o.lanes = 1;
  if (lane > 0) o.monitor_endpoint.clear();  // one monitor per endpoint
  return o;
}

}  // namespace

StripedDealer::StripedDealer(Context& context, const std::string& endpoint,
                             const ChannelOptions& options)
    : endpoint_(endpoint),
      striper_(static_cast<uint16_t>(options.lanes), random_id()),
      reassembler_(limits_of(options)) {
  std::string session(kSessionBytes, kStripedTag);
  const uint64_t id = random_id();
  std::memcpy(session.data() + 1, &id, sizeof id);
  for (uint16_t lane = 0; lane < options.lanes; ++lane)
    lanes_.push_back(std::make_unique<ZmqChannel>(context.zmq(), zmq::socket_type::dealer, endpoint,
                                                  lane_options(options, session, lane)));
}

bool StripedDealer::send(Envelope&& message) {
  GT_ASSERT(!message.frames.empty(), "send: a message needs at least frame 0");
  bool first = true;
  for (auto& c : striper_.cut(std::move(message.frames))) {
    const bool data = c.frames.size() == 2;  // a data chunk; else a tick
    if (lanes_[c.lane]->send(Envelope{{}, std::move(c.frames)})) {
      if (data) first = false;
      continue;
    }
    if (!data) continue;  // a tick that did not fit: the next message's ticks or data follow
    if (!first) {
      auto a = striper_.abort(striper_.last_seq(), striper_.last_seq());
      (void)lanes_[0]->send(Envelope{{}, std::move(a.frames)});
    }
    return false;
  }
  return true;
}

uint64_t StripedDealer::disconnects() {
  uint64_t n = 0;
  for (auto& lane : lanes_) n += lane->disconnects();
  return n;
}

std::optional<Envelope> StripedDealer::receive(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::vector<zmq_pollitem_t> items(lanes_.size());
  for (;;) {
    if (!ready_.empty()) {
      Envelope env{{}, std::move(ready_.front())};
      ready_.pop_front();
      return env;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    for (size_t i = 0; i < lanes_.size(); ++i) items[i] = {lanes_[i]->handle(), 0, ZMQ_POLLIN, 0};
    const int n = zmq_poll(items.data(), static_cast<int>(items.size()),
                           static_cast<long>(std::max<int64_t>(left.count(), 0)));
    if (n < 0) {
      if (zmq_errno() == EINTR) return std::nullopt;
      GT_ZMQ_CHECK(n);
    }
    if (n == 0) return std::nullopt;
    for (size_t i = 0; i < lanes_.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      if (auto env = lanes_[i]->receive(std::chrono::milliseconds(0)))
        take(static_cast<uint16_t>(i), std::move(*env));
    }
    // Chunks of a long message may keep coming: the caller's timeout still holds.
    if (ready_.empty() && Clock::now() >= deadline) return std::nullopt;
  }
}

void StripedDealer::take(uint16_t lane, Envelope&& chunk) {
  try {
    auto h = decode_chunk_header(chunk.frames[0]);
    if (!h) {  // a plain message (a server of an older build refusing what it cannot read)
      ready_.push_back(std::move(chunk.frames));
      return;
    }
    reassembler_.add(lane, *h, piece_of(*h, chunk), ready_);
  } catch (const WireError& e) {
    spdlog::warn("{}: a chunk from the server on lane {} dropped: {}", endpoint_, lane, e.what());
  }
}

StripedRouter::StripedRouter(std::unique_ptr<ZmqChannel> router, const ChannelOptions& options)
    : router_(std::move(router)), limits_(limits_of(options)) {}

bool StripedRouter::send(Envelope&& message) {
  if (!is_session(message.peer)) return router_->send(std::move(message));
  auto it = sessions_.find(message.peer);
  if (it == sessions_.end() || !it->second.striper) return false;
  return send_striped(it->second, message.peer, std::move(message.frames));
}

bool StripedRouter::send_striped(Session& s, const std::string& session,
                                 std::vector<Frame>&& frames) {
  auto& striper = *s.striper;
  // What each lane owed before this message: a lane that cannot take its tick may have lost them.
  std::vector<std::optional<uint64_t>> owed(striper.lanes());
  for (uint16_t l = 0; l < striper.lanes(); ++l) owed[l] = striper.owed_since(l);
  bool sent_any = false;
  for (auto& c : striper.cut(std::move(frames))) {
    const bool data = c.frames.size() == 2;  // a data chunk; else a tick
    const uint16_t lane = c.lane;
    if (router_->send(Envelope{lane_id(session, lane), std::move(c.frames)})) {
      sent_any = sent_any || data;
      continue;
    }
    // That lane is gone (or full): tell the peer, over lane 0, not to wait for what it owed.
    const uint64_t last = striper.last_seq();
    const uint64_t first = data ? std::min(owed[lane].value_or(last), last) : *owed[lane];
    auto a = striper.abort(first, data ? last : last - 1);
    (void)router_->send(Envelope{lane_id(session, 0), std::move(a.frames)});
    if (data) return false;
  }
  return sent_any;
}

void StripedRouter::drop_stale_partials() {
  const auto now = Clock::now();
  if (now - swept_ < std::chrono::seconds(10)) return;
  swept_ = now;
  for (auto& [id, s] : sessions_) {
    if (s.reassembler.partial_messages() == 0 || now - s.heard < kPartialTimeout) continue;
    spdlog::warn("a striped peer silent for {} s: {} unfinished message(s) dropped",
                 kPartialTimeout.count(), s.reassembler.partial_messages());
    s.reassembler = Reassembler(limits_);
  }
}

std::optional<Envelope> StripedRouter::receive(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  drop_stale_partials();
  for (;;) {
    if (!ready_.empty()) {
      Envelope env = std::move(ready_.front());
      ready_.pop_front();
      return env;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    auto env = router_->receive(std::max(left, std::chrono::milliseconds(0)));
    if (!env) {
      if (Clock::now() >= deadline) return std::nullopt;
      continue;
    }
    if (!is_lane(env->peer)) return env;
    const uint16_t lane = static_cast<uint8_t>(env->peer.back());
    take(env->peer.substr(0, kSessionBytes), lane, std::move(*env));
    if (ready_.empty() && Clock::now() >= deadline) return std::nullopt;
  }
}

void StripedRouter::take(const std::string& session, uint16_t lane, Envelope&& chunk) {
  try {
    auto h = decode_chunk_header(chunk.frames[0]);
    if (!h)
      throw WireError(ErrorCode::malformed, "a striped lane sent a message that is not a chunk");
    Frame piece = piece_of(*h, chunk);
    auto it = sessions_.find(session);
    if (it == sessions_.end()) {
      if (sessions_.size() >= kMaxSessions) {
        auto oldest = std::min_element(sessions_.begin(), sessions_.end(), [](auto& a, auto& b) {
          return a.second.heard < b.second.heard;
        });
        sessions_.erase(oldest);
      }
      it = sessions_.emplace(session, Session{nullptr, Reassembler(limits_), {}}).first;
    }
    auto& s = it->second;
    s.heard = Clock::now();
    if (!s.striper || s.striper->lanes() != h->lanes)
      s.striper = std::make_unique<Striper>(h->lanes, random_id());
    std::deque<std::vector<Frame>> done;
    s.reassembler.add(lane, *h, std::move(piece), done);
    for (auto& frames : done) ready_.push_back(Envelope{session, std::move(frames)});
  } catch (const WireError& e) {
    spdlog::warn("a chunk from a striped peer on lane {} dropped: {}", lane, e.what());
  }
}

}  // namespace geotrain::wire
