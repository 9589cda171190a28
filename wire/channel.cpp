#include "wire/channel.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/check_zmq.hpp"
#include "core/endpoint.hpp"
#include "core/error.hpp"
#include "wire/striped_channel.hpp"
#include "wire/zmq_channel.hpp"

namespace geotrain::wire {

ZmqChannel::ZmqChannel(zmq::context_t& context, zmq::socket_type type, const std::string& endpoint,
                       const ChannelOptions& options)
    : socket_(context, type), router_(type == zmq::socket_type::router), options_(options) {
  require_endpoint(endpoint);
  void* s = socket_.handle();
  int sndhwm = options.send_hwm, rcvhwm = options.receive_hwm;
  int linger = static_cast<int>(options.linger.count());
  int64_t maxmsg = options.max_frame_bytes;
  GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_SNDHWM, &sndhwm, sizeof sndhwm));
  GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_RCVHWM, &rcvhwm, sizeof rcvhwm));
  GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger));
  GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg));
  if (options.handshake_ms >= 0)
    GT_ZMQ_CHECK(
        zmq_setsockopt(s, ZMQ_HANDSHAKE_IVL, &options.handshake_ms, sizeof options.handshake_ms));
  GT_ASSERT(!(router_ && options.curve_client) && !(!router_ && options.curve_server),
            "CURVE roles: a ROUTER channel is a CURVE server, a DEALER a CURVE client");
  if (const auto& c = options.curve_server) {
    int on = 1;
    GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_CURVE_SERVER, &on, sizeof on));
    GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, c->secret_key.c_str(), 41));
  }
  if (options.curve_server || (router_ && options.zap_null)) {
    const char domain[] = "geotrain";
    GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, domain, sizeof domain - 1));
  }
  if (const auto& c = options.curve_client) {
    GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, c->server_public_key.c_str(), 41));
    GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, c->public_key.c_str(), 41));
    GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, c->secret_key.c_str(), 41));
  }
  if (options.socket_buffer_bytes > 0) {
    GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_SNDBUF, &options.socket_buffer_bytes,
                                sizeof options.socket_buffer_bytes));
    GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_RCVBUF, &options.socket_buffer_bytes,
                                sizeof options.socket_buffer_bytes));
  }
  if (!options.routing_id.empty()) {
    GT_ASSERT(!router_, "a routing id is a DEALER's");
    GT_ZMQ_CHECK(
        zmq_setsockopt(s, ZMQ_ROUTING_ID, options.routing_id.data(), options.routing_id.size()));
  }
  if (!options.monitor_endpoint.empty())
    GT_ZMQ_CHECK(zmq_socket_monitor(
        s, options.monitor_endpoint.c_str(),
        ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
            ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH));
  if (router_) {
    int mandatory = 1;
    GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &mandatory, sizeof mandatory));
    // A striped peer's lane that reconnects comes back with the same routing id: it replaces
    // the broken connection instead of being refused (wire/striped_channel.hpp).
    int handover = 1;
    GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_ROUTER_HANDOVER, &handover, sizeof handover));
    GT_ZMQ_CHECK(zmq_bind(s, endpoint.c_str()));
    char last[256];
    size_t len = sizeof last;
    GT_ZMQ_CHECK(zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, last, &len));
    endpoint_ = last;
  } else {
    if (options.monitor_endpoint.empty()) {
      // Its own monitor: connections that break (disconnects()).
      static std::atomic<uint64_t> monitors{0};
      const auto at =
          fmt::format("inproc://geotrain-dealer-monitor-{}-{}", ::getpid(), monitors.fetch_add(1));
      GT_ZMQ_CHECK(zmq_socket_monitor(s, at.c_str(), ZMQ_EVENT_DISCONNECTED));
      monitor_ = zmq::socket_t(context, zmq::socket_type::pair);
      monitor_.set(zmq::sockopt::linger, 0);
      monitor_.connect(at);
    }
    GT_ZMQ_CHECK(zmq_connect(s, endpoint.c_str()));
    endpoint_ = endpoint;
  }
}

uint64_t ZmqChannel::disconnects() {
  if (!monitor_) return disconnects_;
  // Each event is two frames: 6 bytes (the event, a value), then the endpoint.
  for (;;) {
    zmq::message_t event;
    if (zmq_msg_recv(event.handle(), monitor_.handle(), ZMQ_DONTWAIT) < 0) break;
    uint16_t id = 0;
    if (event.size() >= sizeof id) std::memcpy(&id, event.data(), sizeof id);
    while (event.more()) {
      zmq::message_t rest;
      if (zmq_msg_recv(rest.handle(), monitor_.handle(), 0) < 0) break;
      event = std::move(rest);
    }
    if (id == ZMQ_EVENT_DISCONNECTED) ++disconnects_;
  }
  return disconnects_;
}

bool ZmqChannel::send(Envelope&& message) {
  GT_ASSERT(!message.frames.empty(), "send: a message needs at least frame 0");
  void* s = socket_.handle();
  if (router_) {
    GT_ASSERT(!message.peer.empty(), "send: a ROUTER channel needs a peer");
    if (zmq_send(s, message.peer.data(), message.peer.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
      int err = zmq_errno();
      if (err == EAGAIN || err == EHOSTUNREACH) return false;
      GT_ZMQ_CHECK(-1);
    }
  }
  for (size_t i = 0; i < message.frames.size(); ++i) {
    int flags = (i + 1 < message.frames.size() ? ZMQ_SNDMORE : 0) | (router_ ? 0 : ZMQ_DONTWAIT);
    // After the first part is accepted the rest of a multipart message is always queued.
    if (zmq_msg_send(message.frames[i].message().handle(), s, flags) < 0) {
      if (zmq_errno() == EAGAIN && i == 0 && !router_) return false;
      GT_ZMQ_CHECK(-1);
    }
  }
  return true;
}

std::optional<Envelope> ZmqChannel::receive(std::chrono::milliseconds timeout) {
  zmq_pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
  int ready = zmq_poll(&item, 1, static_cast<long>(timeout.count()));
  if (ready < 0) {
    if (zmq_errno() == EINTR) return std::nullopt;
    GT_ZMQ_CHECK(ready);
  }
  if (ready == 0) return std::nullopt;
  Envelope env;
  bool more = true;
  bool first = true;
  while (more) {
    zmq::message_t part;
    GT_ZMQ_CHECK(zmq_msg_recv(part.handle(), socket_.handle(), 0));
    more = part.more();
    if (router_ && first) {
      env.peer.assign(static_cast<const char*>(part.data()), part.size());
    } else if (env.frames.size() <= options_.max_frames) {
      env.frames.emplace_back(std::move(part));
    }
    first = false;
  }
  if (env.frames.empty()) return std::nullopt;  // an identity with no body: nothing to answer
  return env;
}

SocketBuffers effective_socket_buffer(int requested) {
  auto sysctl = [](const char* path) -> int64_t {
    std::ifstream in(path);
    int64_t v = -1;
    if (!(in >> v)) return -1;
    return v;
  };
  SocketBuffers b;
  b.send_max = sysctl("/proc/sys/net/core/wmem_max");
  b.receive_max = sysctl("/proc/sys/net/core/rmem_max");
  if (requested > 0) {
    b.send_bytes = b.send_max >= 0 ? std::min<int64_t>(requested, b.send_max) : requested;
    b.receive_bytes = b.receive_max >= 0 ? std::min<int64_t>(requested, b.receive_max) : requested;
  }
  return b;
}

uint32_t streams_for_link(double rtt_s, double mbps, double window_bytes) {
  if (window_bytes <= 0 || mbps <= 0 || rtt_s <= 0) return 1;
  const double n = std::ceil(mbps * 1e6 / 8 * rtt_s / window_bytes);
  return static_cast<uint32_t>(std::clamp(n, 1.0, double(kMaxAutoStreams)));
}

double tcp_window_bytes(int socket_buffer_bytes) {
  if (socket_buffer_bytes > 0)
    return static_cast<double>(effective_socket_buffer(socket_buffer_bytes).receive_bytes);
  std::ifstream in("/proc/sys/net/ipv4/tcp_rmem");
  int64_t lo = 0, def = 0, max = 0;
  if (in >> lo >> def >> max && max > 0) return static_cast<double>(max) / 2;
  return 3.0 * 1024 * 1024;
}

std::unique_ptr<Channel> bind_router(Context& context, const std::string& endpoint,
                                     const ChannelOptions& options) {
  GT_REQUIRE(options.lanes == 1, "a ROUTER channel has one socket (lanes is {})", options.lanes);
  return std::make_unique<StripedRouter>(
      std::make_unique<ZmqChannel>(context.zmq(), zmq::socket_type::router, endpoint, options),
      options);
}

std::unique_ptr<Channel> connect_dealer(Context& context, const std::string& endpoint,
                                        const ChannelOptions& options) {
  GT_REQUIRE(options.lanes >= 1 && options.lanes <= kMaxLanes,
             "lanes (streams per server) is {}, must be in [1, {}]", options.lanes, kMaxLanes);
  if (options.lanes == 1)
    return std::make_unique<ZmqChannel>(context.zmq(), zmq::socket_type::dealer, endpoint, options);
  return std::make_unique<StripedDealer>(context, endpoint, options);
}

}  // namespace geotrain::wire
