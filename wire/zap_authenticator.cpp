#include "wire/zap_authenticator.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <utility>
#include <vector>

#include "core/check_zmq.hpp"
#include "core/error_types.hpp"
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

// The peer of an accepted descriptor: its address as ZAP requests name it (numeric host, no
// port), and the port. "unknown" when the connection is gone already.
struct Peer {
  std::string host = "unknown";
  uint16_t port = 0;
  std::string text() const { return port ? fmt::format("{}:{}", host, port) : host; }
};

Peer peer_of(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return {};
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    return {host, ntohs(a->sin_port)};
  }
  if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    return {host, ntohs(a->sin6_port)};
  }
  return {"local", 0};
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

uint64_t next_handler_number() {
  static std::atomic<uint64_t> next{0};
  return next++;
}

}  // namespace

ZapAuthenticator::ZapAuthenticator(Context& context, ZapPolicy policy)
    : policy_(std::move(policy)),
      // A number of its own: an inproc endpoint outlives its socket for a moment, and a new
      // handler at a freed one's address must not find the name taken.
      monitor_endpoint_(fmt::format("inproc://geotrain.zap-monitor.{}", next_handler_number())),
      zap_(context.zmq(), zmq::socket_type::rep),
      monitor_(context.zmq(), zmq::socket_type::pair) {
  for (const auto& [key, name] : policy_.allowed) allowed_[z85_to_binary(key)] = name;
  int linger = 0;
  GT_ZMQ_CHECK(zmq_setsockopt(zap_.handle(), ZMQ_LINGER, &linger, sizeof linger));
  GT_ZMQ_CHECK(zmq_setsockopt(monitor_.handle(), ZMQ_LINGER, &linger, sizeof linger));
  // Bound here, on the constructing thread, so the handler exists before any server socket binds.
  GT_ZMQ_CHECK(zmq_bind(zap_.handle(), "inproc://zeromq.zap.01"));
  // The monitored sockets bind this endpoint later (zmq_socket_monitor); inproc allows connecting
  // first.
  GT_ZMQ_CHECK(zmq_connect(monitor_.handle(), monitor_endpoint_.c_str()));
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0)
    throw SystemError("libc", "eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)", __FILE__, __LINE__,
                      std::strerror(errno));
  thread_ = std::jthread([this](std::stop_token stop) { loop(stop); });
}

ZapAuthenticator::~ZapAuthenticator() {
  thread_.request_stop();
  // Wakes the poll at once: a server's destruction does not wait out the poll's timeout.
  const uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  ::close(wake_fd_);
}

ZapAuthenticator::Counts ZapAuthenticator::counts() const {
  return {accepted_.load(), refused_.load(), refused_cap_.load(), failed_.load(), open_.load()};
}

void ZapAuthenticator::loop(std::stop_token stop) {
  while (!stop.stop_requested()) {
    zmq_pollitem_t items[3] = {{zap_.handle(), 0, ZMQ_POLLIN, 0},
                               {monitor_.handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, wake_fd_, ZMQ_POLLIN, 0}};
    const int ready = zmq_poll(items, 3, -1);
    if (ready < 0) {
      if (zmq_errno() == ETERM) return;
      continue;  // EINTR
    }
    try {
      // Connection events first: a handshake's ZAP request comes after its ACCEPTED event, and
      // the cap is checked against counts that include it.
      if (items[1].revents & ZMQ_POLLIN) {
        int events = 0;
        size_t size = sizeof events;
        do {
          on_monitor_event();
          GT_ZMQ_CHECK(zmq_getsockopt(monitor_.handle(), ZMQ_EVENTS, &events, &size));
        } while (events & ZMQ_POLLIN);
      }
      if (items[0].revents & ZMQ_POLLIN) on_zap();
    } catch (const std::exception& e) {
      spdlog::error("ZAP handler: {}", e.what());
      if (zmq_errno() == ETERM) return;
    }
  }
}

void ZapAuthenticator::on_zap() {
  // Request (RFC 27): version, request id, domain, address, routing id, mechanism, credentials.
  auto req = receive_all(zap_);
  auto text = [&](size_t i) { return i < req.size() ? req[i].to_string() : std::string(); };
  const std::string version = text(0), id = text(1), address = text(3), mechanism = text(5);
  const char* wanted = policy_.curve ? "CURVE" : "NULL";
  std::string code = "400", status = "refused", user;
  const auto open = open_by_address_.find(address);
  const uint32_t open_here = open == open_by_address_.end() ? 0 : open->second;
  if (version != "1.0" || req.size() < 6) {
    code = "500";
    status = "malformed ZAP request";
    spdlog::warn("ZAP: malformed request ({} frames, version '{}')", req.size(), version);
  } else if (mechanism != wanted) {
    status = fmt::format("only {} clients are accepted", wanted);
    ++refused_;
    spdlog::warn("{}: refused a client from {}: it uses the {} mechanism, not {}", wanted, address,
                 mechanism, wanted);
  } else if (policy_.curve && (req.size() < 7 || req[6].size() != 32)) {
    status = "bad CURVE credentials";
    ++refused_;
    spdlog::warn("CURVE: refused a client from {}: bad credentials", address);
  } else if (policy_.curve && !allowed_.count(req[6].to_string())) {
    status = "client key not allowed";
    ++refused_;
    spdlog::warn("CURVE: refused a client from {}: its public key {} is not in the allow-list",
                 address, binary_to_z85(req[6].to_string()));
  } else if (policy_.max_connections_per_address > 0 &&
             open_here > policy_.max_connections_per_address) {
    status = fmt::format("too many connections from {} ({} open, limit {})", address, open_here,
                         policy_.max_connections_per_address);
    ++refused_cap_;
    spdlog::warn(
        "{}: refused a client from {}: {} connections open from that address, limit {} "
        "(server.max_connections_per_address)",
        wanted, address, open_here, policy_.max_connections_per_address);
  } else {
    code = "200";
    status = "OK";
    ++accepted_;
    if (policy_.curve) user = allowed_.at(req[6].to_string());
    spdlog::debug("{}: accepted {} from {}", wanted, user.empty() ? "a client" : user, address);
  }
  // Reply: version, request id, status code, status text, user id, metadata (empty).
  for (const std::string& part : {std::string("1.0"), id, code, status, user})
    zap_.send(zmq::buffer(part), zmq::send_flags::sndmore);
  zap_.send(zmq::message_t(), zmq::send_flags::none);
}

void ZapAuthenticator::forget_connection(std::map<int, std::string>::iterator it) {
  if (auto n = open_by_address_.find(it->second); n != open_by_address_.end() && --n->second == 0)
    open_by_address_.erase(n);
  address_of_fd_.erase(it);
}

void ZapAuthenticator::on_monitor_event() {
  auto parts = receive_all(monitor_);
  if (parts.size() < 2 || parts[0].size() < 6) return;
  uint16_t event = 0;
  uint32_t value = 0;
  std::memcpy(&event, parts[0].data(), sizeof event);
  std::memcpy(&value, static_cast<const char*>(parts[0].data()) + 2, sizeof value);
  const std::string endpoint = parts[1].to_string();
  switch (event) {
    case ZMQ_EVENT_ACCEPTED: {
      ++open_;
      const int fd = static_cast<int>(value);
      const Peer peer = peer_of(fd);
      last_peer_ = peer.text();
      if (const auto old = address_of_fd_.find(fd); old != address_of_fd_.end())
        forget_connection(old);  // its DISCONNECTED was lost: the descriptor is reused
      address_of_fd_[fd] = peer.host;
      ++open_by_address_[peer.host];
      break;
    }
    case ZMQ_EVENT_DISCONNECTED:
      if (open_.load() > 0) --open_;
      if (const auto it = address_of_fd_.find(static_cast<int>(value)); it != address_of_fd_.end())
        forget_connection(it);
      break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      ++failed_;
      spdlog::warn("{}: refused a connection to {} (peer {}): {}", policy_.curve ? "CURVE" : "ZAP",
                   endpoint, last_peer_, handshake_reason(event, value));
      break;
    default:
      break;
  }
}

}  // namespace geotrain::wire
