#include "wire/channel.hpp"

#include "core/check_zmq.hpp"
#include "core/error.hpp"

namespace geotrain::wire {

namespace {

void check_endpoint(const std::string& endpoint) {
  const bool ok = endpoint.starts_with("tcp://") || endpoint.starts_with("inproc://") ||
                  endpoint.starts_with("ipc://");
  GT_REQUIRE(ok && endpoint.find("://") + 3 < endpoint.size(),
             "endpoint '{}' is not allowed: use tcp://host:port, inproc://name or ipc://path",
             endpoint);
}

class ZmqChannel final : public Channel {
 public:
  ZmqChannel(zmq::context_t& context, zmq::socket_type type, const std::string& endpoint,
             const ChannelOptions& options)
      : socket_(context, type), router_(type == zmq::socket_type::router), options_(options) {
    check_endpoint(endpoint);
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
    if (!options.monitor_endpoint.empty())
      GT_ZMQ_CHECK(zmq_socket_monitor(
          s, options.monitor_endpoint.c_str(),
          ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
              ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH));
    if (router_) {
      int mandatory = 1;
      GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &mandatory, sizeof mandatory));
      GT_ZMQ_CHECK(zmq_bind(s, endpoint.c_str()));
      char last[256];
      size_t len = sizeof last;
      GT_ZMQ_CHECK(zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, last, &len));
      endpoint_ = last;
    } else {
      GT_ZMQ_CHECK(zmq_connect(s, endpoint.c_str()));
      endpoint_ = endpoint;
    }
  }

  std::string endpoint() const override { return endpoint_; }

  bool send(Envelope&& message) override {
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
      if (zmq_msg_send(message.frames[i].handle(), s, flags) < 0) {
        if (zmq_errno() == EAGAIN && i == 0 && !router_) return false;
        GT_ZMQ_CHECK(-1);
      }
    }
    return true;
  }

  std::optional<Envelope> receive(std::chrono::milliseconds timeout) override {
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
        env.frames.push_back(std::move(part));
      }
      first = false;
    }
    if (env.frames.empty()) return std::nullopt;  // an identity with no body: nothing to answer
    return env;
  }

 private:
  zmq::socket_t socket_;
  bool router_;
  ChannelOptions options_;
  std::string endpoint_;
};

}  // namespace

std::unique_ptr<Channel> bind_router(zmq::context_t& context, const std::string& endpoint,
                                     const ChannelOptions& options) {
  return std::make_unique<ZmqChannel>(context, zmq::socket_type::router, endpoint, options);
}

std::unique_ptr<Channel> connect_dealer(zmq::context_t& context, const std::string& endpoint,
                                        const ChannelOptions& options) {
  return std::make_unique<ZmqChannel>(context, zmq::socket_type::dealer, endpoint, options);
}

}  // namespace geotrain::wire
