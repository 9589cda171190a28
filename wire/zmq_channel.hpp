// ZmqChannel: a Channel over one ZeroMQ socket (wire/channel.hpp says what every channel does).
// Internal to wire/: bind_router() and connect_dealer() hand out Channels; the striped channels
// (wire/striped_channel.hpp) are built from these and poll their sockets together.
#pragma once

#include "wire/channel.hpp"

namespace geotrain::wire {

class ZmqChannel final : public Channel {
 public:
  // Applies `options` (limits, CURVE, monitor, socket buffers, routing id) and binds (ROUTER) or
  // connects (DEALER). InputError for a bad endpoint; a refused socket option throws.
  ZmqChannel(zmq::context_t& context, zmq::socket_type type, const std::string& endpoint,
             const ChannelOptions& options);

  std::string endpoint() const override { return endpoint_; }
  bool send(Envelope&& message) override;
  std::optional<Envelope> receive(std::chrono::milliseconds timeout) override;
  uint64_t disconnects() override;

  // For zmq_poll over several channels.
  void* handle() { return socket_.handle(); }

 private:
  zmq::socket_t socket_;
  // A DEALER's own socket monitor (ZMQ_EVENT_DISCONNECTED), read by disconnects().
  zmq::socket_t monitor_;
  uint64_t disconnects_ = 0;
  bool router_;
  ChannelOptions options_;
  std::string endpoint_;
};

}  // namespace geotrain::wire
