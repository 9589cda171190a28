// ZapAuthenticator: the ZAP handler (ZeroMQ authentication protocol, RFC 27) of one
// wire::Context: who may complete a handshake with the server sockets of that context.
//
// libzmq asks the handler bound at inproc://zeromq.zap.01 of the socket's context about every
// handshake on a CURVE server socket, and on a NULL server socket that sets a ZAP domain
// (ChannelOptions::zap_null). Two checks, each optional (ZapPolicy):
//   - CURVE: a client must use CURVE with a public key in the allow-list (else 400);
//   - a cap on open connections per peer address (server.max_connections_per_address): a
//     handshake from an address that already holds more than that many open connections is
//     refused (400), for CURVE and NULL clients alike, so that a client opening connection after
//     connection (and completing every handshake) holds at most the cap. libzmq closes a refused
//     connection at once.
// Each refusal is logged with the peer's address and the reason. It also reads the connection
// and handshake events of the sockets that name monitor_endpoint() in their ChannelOptions: the
// cap counts open connections from them (ACCEPTED and DISCONNECTED, by the peer address of the
// accepted descriptor), and clients refused before ZAP is asked (no CURVE at all, the NULL
// mechanism: "mechanism mismatch"; or a wrong server key: "cryptographic error") are logged too.
// libzmq's v1 monitor events do not name the peer of a failed handshake; the log names the
// address of the latest connection accepted, which is that peer unless several connect at once.
// Connections that reach a server through netsim all come from netsim's address, so the cap
// then bounds them together.
//
// Owns one thread, the ZAP socket and the monitor socket. Construct it before binding any server
// socket that asks it (libzmq lets a client in when no handler is bound); at most one per context
// (the ZAP address is per context: a second one throws SystemError). The destructor stops and
// wakes and joins the thread. counts() is thread-safe; nothing else is called after construction.
#pragma once

#include <zmq.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <thread>

#include "wire/context.hpp"

namespace geotrain::wire {

struct ZapPolicy {
  bool curve = false;  // CURVE clients with an allowed key only; false: NULL clients
  std::map<std::string, std::string> allowed;  // Z85 client public key -> a name for logs
  uint32_t max_connections_per_address = 0;    // 0: no cap
};

class ZapAuthenticator {
 public:
  ZapAuthenticator(Context& context, ZapPolicy policy);
  ~ZapAuthenticator();
  ZapAuthenticator(const ZapAuthenticator&) = delete;
  ZapAuthenticator& operator=(const ZapAuthenticator&) = delete;

  // inproc endpoint for ChannelOptions::monitor_endpoint of this context's server sockets.
  const std::string& monitor_endpoint() const { return monitor_endpoint_; }
  const ZapPolicy& policy() const { return policy_; }

  struct Counts {
    uint64_t accepted = 0;           // ZAP 200
    uint64_t refused_key = 0;        // ZAP 400: CURVE client key not in the allow-list
    uint64_t refused_cap = 0;        // ZAP 400: its address already held the cap
    uint64_t failed_handshakes = 0;  // handshake failures seen by the monitor (any reason)
    uint64_t connections_open = 0;   // accepted TCP connections not yet closed
  };
  Counts counts() const;

 private:
  void loop(std::stop_token stop);
  void on_zap();
  void on_monitor_event();
  void forget_connection(std::map<int, std::string>::iterator it);

  ZapPolicy policy_;
  std::map<std::string, std::string> allowed_;  // raw 32-byte key -> name
  std::string monitor_endpoint_;
  zmq::socket_t zap_;
  zmq::socket_t monitor_;
  std::string last_peer_ = "unknown";         // address of the latest accepted connection
  std::map<int, std::string> address_of_fd_;  // open connections: descriptor -> peer address
  std::map<std::string, uint32_t> open_by_address_;
  std::atomic<uint64_t> accepted_{0}, refused_{0}, refused_cap_{0}, failed_{0}, open_{0};
  int wake_fd_ = -1;     // eventfd the destructor writes, so that the thread's poll returns
  std::jthread thread_;  // last: joined before the sockets close
};

}  // namespace geotrain::wire
