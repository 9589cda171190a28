#include "wire/handshake_check.hpp"

#include <fmt/format.h>

#include <cstring>
#include <memory>

#include "core/check_zmq.hpp"
#include "core/error.hpp"

namespace geotrain::wire {

namespace {

using Clock = std::chrono::steady_clock;

struct Probe {
  zmq::socket_t dealer;
  zmq::socket_t monitor;
  bool curve = false;
  bool handshaking = false;  // connected, no handshake event yet
  bool done = false;
  HandshakeResult result;
};

// Why a handshake failed, from the client's side, in words that point at the fix.
std::string protocol_reason(uint32_t value, bool curve) {
  switch (value) {
    case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
      return curve ? "the server does not use CURVE but this client does (security.curve differs "
                     "between the server's config and this client's)"
                   : "the server requires CURVE and this client connects without keys (give the "
                     "deployment's keys: security.keys_dir)";
    case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
    case ZMQ_PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE:
      return "the CURVE handshake failed to decrypt (the server's public key in keys_dir is not "
             "this server's, or the keypair is damaged)";
    default:
      return fmt::format("ZMTP protocol error 0x{:x} during the handshake", value);
  }
}

void finish(Probe& p, HandshakeOutcome outcome, std::string reason) {
  p.done = true;
  p.result.outcome = outcome;
  p.result.reason = std::move(reason);
}

void on_event(Probe& p, uint16_t event, uint32_t value, int closed_limit) {
  switch (event) {
    case ZMQ_EVENT_CONNECTED:
      p.handshaking = true;
      break;
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
      finish(p, HandshakeOutcome::succeeded, "");
      break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      finish(p, HandshakeOutcome::refused,
             fmt::format("the server's authenticator refused this client's key (ZAP status {}): "
                         "the client key is not one of the deployment's region keys the server "
                         "allows (another keys_dir, or keys generated again since)",
                         value));
      break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      finish(p, HandshakeOutcome::refused, protocol_reason(value, p.curve));
      break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
    case ZMQ_EVENT_DISCONNECTED:
      if (!p.handshaking && event == ZMQ_EVENT_DISCONNECTED) break;  // counted already
      p.handshaking = false;
      if (++p.result.closed >= closed_limit)
        finish(p, HandshakeOutcome::refused,
               fmt::format(
                   "the server closed the connection during the handshake {} times in a row: {}",
                   p.result.closed,
                   p.curve ? "it cannot decrypt this client's CURVE hello (the server's public key "
                             "in keys_dir is not this server's), or it does not use CURVE, or a "
                             "proxy in front of it cannot reach it"
                           : "it may require CURVE (this client has no keys), or a proxy in front "
                             "of it cannot reach it"));
      break;
    default:
      break;
  }
}

}  // namespace

std::vector<HandshakeResult> check_handshakes(Context& context,
                                              const std::vector<HandshakeTarget>& targets,
                                              std::chrono::milliseconds timeout, int closed_limit) {
  std::vector<std::unique_ptr<Probe>> probes;
  try {
    for (size_t i = 0; i < targets.size(); ++i) {
      const auto& t = targets[i];
      auto p = std::make_unique<Probe>();
      p->dealer = zmq::socket_t(context.zmq(), zmq::socket_type::dealer);
      p->monitor = zmq::socket_t(context.zmq(), zmq::socket_type::pair);
      p->curve = t.curve.has_value();
      void* s = p->dealer.handle();
      const int linger = 0;
      GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger));
      if (const auto& c = t.curve) {
        GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, c->server_public_key.c_str(), 41));
        GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, c->public_key.c_str(), 41));
        GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, c->secret_key.c_str(), 41));
      }
      const std::string monitor_endpoint =
          fmt::format("inproc://geotrain.handshake-check.{}", static_cast<const void*>(p.get()));
      GT_ZMQ_CHECK(zmq_socket_monitor(
          s, monitor_endpoint.c_str(),
          ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
              ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
              ZMQ_EVENT_HANDSHAKE_FAILED_AUTH));
      p->monitor.connect(monitor_endpoint);
      GT_ZMQ_CHECK(zmq_connect(s, t.endpoint.c_str()));
      probes.push_back(std::move(p));
    }

    const auto deadline = Clock::now() + timeout;
    for (;;) {
      std::vector<zmq::pollitem_t> items;
      std::vector<Probe*> waiting;
      for (auto& p : probes)
        if (!p->done) {
          items.push_back({p->monitor.handle(), 0, ZMQ_POLLIN, 0});
          waiting.push_back(p.get());
        }
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      if (waiting.empty() || left.count() <= 0) break;
      zmq::poll(items, left);
      for (size_t i = 0; i < items.size(); ++i) {
        if (!(items[i].revents & ZMQ_POLLIN)) continue;
        zmq::message_t head, endpoint;
        if (!waiting[i]->monitor.recv(head, zmq::recv_flags::dontwait)) continue;
        if (head.more()) (void)waiting[i]->monitor.recv(endpoint, zmq::recv_flags::dontwait);
        if (head.size() < 6) continue;
        uint16_t event = 0;
        uint32_t value = 0;
        std::memcpy(&event, head.data(), sizeof event);
        std::memcpy(&value, static_cast<const char*>(head.data()) + 2, sizeof value);
        on_event(*waiting[i], event, value, closed_limit);
      }
    }
  } catch (const zmq::error_t& e) {
    throw SystemError("zmq", "check_handshakes", __FILE__, __LINE__, e.what());
  }

  std::vector<HandshakeResult> results;
  for (auto& p : probes) {
    // Stop the monitor before closing the socket it watches (zmq_socket_monitor(3)).
    zmq_socket_monitor(p->dealer.handle(), nullptr, 0);
    p->monitor.close();
    p->dealer.close();
    results.push_back(p->result);
  }
  return results;
}

}  // namespace geotrain::wire
