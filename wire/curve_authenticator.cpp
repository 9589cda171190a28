#include "wire/curve_authenticator.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cstring>
#include <vector>

#include "core/check_zmq.hpp"
#include "wire/curve_keys.hpp"

namespace geotrain::wire {

namespace {

std::vector<zmq::message_t> receive_all(zmq::socket_t& s) {
  std::vector<zmq::message_t> parts;
  bool more = true;
  while (more) {
    zmq::message_t part;
    GT_ZMQ_CHECK(zmq_msg_recv(part.handle(), s.handle(), 0));
    more = part.more();
    parts.push_back(std::move(part));
  }
  return parts;
}

std::string peer_of(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "unknown";
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  } else {
    return "local";
  }
  return fmt::format("{}:{}", host, port);
}

const char* handshake_reason(int event, uint32_t value) {
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) return "refused by the ZAP handler";
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
    return "handshake failed (timeout or connection closed before it completed)";
  switch (value) {
    case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
      return "the client does not speak CURVE (mechanism mismatch, e.g. an unauthenticated NULL "
             "client)";
    case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
      return "cryptographic error (the client has a wrong server key or a bad keypair)";
    case ZMQ_PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE:
      return "CURVE key exchange failed";
    default:
      return "ZMTP protocol error";
  }
}

}  // namespace

CurveAuthenticator::CurveAuthenticator(zmq::context_t& context,
                                       std::map<std::string, std::string> allowed)
    : monitor_endpoint_(
          fmt::format("inproc://geotrain.curve-monitor.{}", static_cast<const void*>(this))),
      zap_(context, zmq::socket_type::rep),
      monitor_(context, zmq::socket_type::pair) {
  for (auto& [key, name] : allowed) allowed_[z85_to_binary(key)] = name;
  int linger = 0;
  GT_ZMQ_CHECK(zmq_setsockopt(zap_.handle(), ZMQ_LINGER, &linger, sizeof linger));
  GT_ZMQ_CHECK(zmq_setsockopt(monitor_.handle(), ZMQ_LINGER, &linger, sizeof linger));
  // Bound here, on the constructing thread, so the handler exists before any server socket binds.
  GT_ZMQ_CHECK(zmq_bind(zap_.handle(), "inproc://zeromq.zap.01"));
  // The monitored sockets bind this endpoint later (zmq_socket_monitor); inproc allows connecting
  // first.
  GT_ZMQ_CHECK(zmq_connect(monitor_.handle(), monitor_endpoint_.c_str()));
  thread_ = std::jthread([this](std::stop_token stop) { loop(stop); });
}

CurveAuthenticator::~CurveAuthenticator() {
  thread_.request_stop();
  if (thread_.joinable()) thread_.join();
}

CurveAuthenticator::Counts CurveAuthenticator::counts() const {
  return {accepted_.load(), refused_.load(), failed_.load(), open_.load()};
}

void CurveAuthenticator::loop(std::stop_token stop) {
  while (!stop.stop_requested()) {
    zmq_pollitem_t items[2] = {{zap_.handle(), 0, ZMQ_POLLIN, 0},
                               {monitor_.handle(), 0, ZMQ_POLLIN, 0}};
    const int ready = zmq_poll(items, 2, 50);
    if (ready < 0) {
      if (zmq_errno() == ETERM) return;
      continue;  // EINTR
    }
    try {
      if (items[0].revents & ZMQ_POLLIN) on_zap();
      if (items[1].revents & ZMQ_POLLIN) on_monitor_event();
    } catch (const std::exception& e) {
      spdlog::error("CURVE authenticator: {}", e.what());
      if (zmq_errno() == ETERM) return;
    }
  }
}

void CurveAuthenticator::on_zap() {
  // Request (RFC 27): version, request id, domain, address, routing id, mechanism, credentials.
  auto req = receive_all(zap_);
  auto text = [&](size_t i) { return i < req.size() ? req[i].to_string() : std::string(); };
  const std::string version = text(0), id = text(1), address = text(3), mechanism = text(5);
  std::string code = "400", status = "refused";
  if (version != "1.0" || req.size() < 6) {
    code = "500";
    status = "malformed ZAP request";
    spdlog::warn("CURVE: malformed ZAP request ({} frames, version '{}')", req.size(), version);
  } else if (mechanism != "CURVE") {
    status = "only CURVE clients are accepted";
    ++refused_;
    spdlog::warn("CURVE: refused a client from {}: it uses the {} mechanism, not CURVE", address,
                 mechanism);
  } else if (req.size() < 7 || req[6].size() != 32) {
    status = "bad CURVE credentials";
    ++refused_;
    spdlog::warn("CURVE: refused a client from {}: bad credentials", address);
  } else {
    const std::string key = req[6].to_string();
    if (auto it = allowed_.find(key); it != allowed_.end()) {
      code = "200";
      status = "OK";
      ++accepted_;
      spdlog::debug("CURVE: accepted {} from {}", it->second, address);
    } else {
      status = "client key not allowed";
      ++refused_;
      spdlog::warn("CURVE: refused a client from {}: its public key {} is not in the allow-list",
                   address, binary_to_z85(key));
    }
  }
  // Reply: version, request id, status code, status text, user id, metadata (empty).
  const std::string user = code == "200" ? allowed_.at(req[6].to_string()) : std::string();
  for (const std::string& part : {std::string("1.0"), id, code, status, user})
    zap_.send(zmq::buffer(part), zmq::send_flags::sndmore);
  zap_.send(zmq::message_t(), zmq::send_flags::none);
}

void CurveAuthenticator::on_monitor_event() {
  auto parts = receive_all(monitor_);
  if (parts.size() < 2 || parts[0].size() < 6) return;
  uint16_t event = 0;
  uint32_t value = 0;
  std::memcpy(&event, parts[0].data(), sizeof event);
  std::memcpy(&value, static_cast<const char*>(parts[0].data()) + 2, sizeof value);
  const std::string endpoint = parts[1].to_string();
  switch (event) {
    case ZMQ_EVENT_ACCEPTED:
      ++open_;
      last_peer_ = peer_of(static_cast<int>(value));
      break;
    case ZMQ_EVENT_DISCONNECTED:
      if (open_.load() > 0) --open_;
      break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      ++failed_;
      spdlog::warn("CURVE: refused a connection to {} (peer {}): {}", endpoint, last_peer_,
                   handshake_reason(event, value));
      break;
    default:
      break;
  }
}

}  // namespace geotrain::wire
