// The two ends of a striped connection (wire/stripe.hpp says how a message is cut and put back).
//
// StripedDealer: a leader's channel to one server over `lanes` DEALER sockets to the same
// endpoint, each its own TCP connection (through netsim, each with its own window). Lane i's
// routing id is 0xFE, an 8-byte random session id, then i: the server tells the lanes of one
// peer by it, and a lane that reconnects keeps its id (the ROUTER hands over to it).
//
// StripedRouter: the server's ROUTER channel. Messages from plain DEALERs pass through as they
// are; chunks from a striped peer's lanes are reassembled per session and handed up as one
// message whose peer is the session (0xFE + session id, 9 bytes), and replies to such a peer are
// striped over its lanes. So the protocol above sees one peer per leader either way, with the
// same guarantees (one connection's order; a lost message is lost whole).
//
// Both: blocking and threading as Channel. A malformed chunk is logged and dropped (the peer's
// request then gets no reply, as for a message lost with a connection).
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "wire/channel.hpp"
#include "wire/context.hpp"
#include "wire/stripe.hpp"
#include "wire/zmq_channel.hpp"

namespace geotrain::wire {

class StripedDealer final : public Channel {
 public:
  StripedDealer(Context& context, const std::string& endpoint, const ChannelOptions& options);

  std::string endpoint() const override { return endpoint_; }
  // False when lane 0 is full (nothing sent) or a later chunk could not be queued (the message
  // is aborted: the server drops what it got of it).
  bool send(Envelope&& message) override;
  std::optional<Envelope> receive(std::chrono::milliseconds timeout) override;
  uint64_t disconnects() override;  // over every lane
  uint64_t messages_lost() override { return reassembler_.dropped(); }
  bool receiving() override { return reassembler_.partial_messages() > 0; }

 private:
  void take(uint16_t lane, Envelope&& chunk);

  std::string endpoint_;
  std::vector<std::unique_ptr<ZmqChannel>> lanes_;
  Striper striper_;
  Reassembler reassembler_;
  std::deque<std::vector<Frame>> ready_;
};

class StripedRouter final : public Channel {
 public:
  StripedRouter(std::unique_ptr<ZmqChannel> router, const ChannelOptions& options);

  std::string endpoint() const override { return router_->endpoint(); }
  bool send(Envelope&& message) override;
  std::optional<Envelope> receive(std::chrono::milliseconds timeout) override;

  // Striped sessions kept at once; the least recently heard from is forgotten beyond it.
  static constexpr size_t kMaxSessions = 1024;
  // A session silent this long drops what it holds of unfinished messages (its leader died
  // mid-message); its numbering stays, so that replies still owed to it go out.
  static constexpr std::chrono::seconds kPartialTimeout{600};

 private:
  struct Session {
    std::unique_ptr<Striper> striper;  // made with the lane count of the peer's first chunk
    Reassembler reassembler;
    std::chrono::steady_clock::time_point heard;
  };
  // A chunk from lane `lane` of `session`; complete messages go to ready_.
  void take(const std::string& session, uint16_t lane, Envelope&& chunk);
  void drop_stale_partials();
  bool send_striped(Session& s, const std::string& session, std::vector<Frame>&& frames);

  std::unique_ptr<ZmqChannel> router_;
  ReassemblyLimits limits_;
  std::map<std::string, Session> sessions_;
  std::deque<Envelope> ready_;
  std::chrono::steady_clock::time_point swept_{};
};

}  // namespace geotrain::wire
