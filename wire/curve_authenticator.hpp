// CurveAuthenticator: the ZAP handler (ZeroMQ authentication protocol, RFC 27) of one
// zmq::context_t, with an allow-list of CURVE client public keys.
//
// libzmq asks the handler bound at inproc://zeromq.zap.01 of the socket's context about every
// CURVE handshake on a CURVE server socket; this one answers 200 for a client key in the
// allow-list and 400 otherwise, logging each refusal with the peer's address and the reason.
// It also reads the handshake events of the sockets that name monitor_endpoint() in their
// ChannelOptions, so that clients refused before ZAP is asked (no CURVE at all, the NULL
// mechanism: "mechanism mismatch"; or a wrong server key: "cryptographic error") are logged too.
// libzmq's v1 monitor events do not name the peer of a failed handshake; the log names the
// address of the latest connection accepted, which is that peer unless several connect at once.
//
// Owns one thread, the ZAP socket and the monitor socket. Construct it before binding any CURVE
// server socket in the context (libzmq lets a CURVE client in when no handler is bound); at most
// one per context (the ZAP address is per context: a second one throws SystemError). The
// destructor stops and joins the thread. counts() is thread-safe; nothing else is called after
// construction.
#pragma once

#include <zmq.hpp>

#include <atomic>
#include <map>
#include <string>
#include <thread>

namespace geotrain::wire {

class CurveAuthenticator {
 public:
  // allowed: Z85 client public key -> a name for logs (e.g. "client key of region eu-west").
  CurveAuthenticator(zmq::context_t& context, std::map<std::string, std::string> allowed);
  ~CurveAuthenticator();
  CurveAuthenticator(const CurveAuthenticator&) = delete;
  CurveAuthenticator& operator=(const CurveAuthenticator&) = delete;

  // inproc endpoint for ChannelOptions::monitor_endpoint of this context's server sockets.
  const std::string& monitor_endpoint() const { return monitor_endpoint_; }

  struct Counts {
    uint64_t accepted = 0;           // ZAP 200
    uint64_t refused_key = 0;        // ZAP 400: client key not in the allow-list
    uint64_t failed_handshakes = 0;  // handshake failures seen by the monitor (any reason)
    uint64_t connections_open = 0;   // accepted TCP connections not yet closed
  };
  Counts counts() const;

 private:
  void loop(std::stop_token stop);
  void on_zap();
  void on_monitor_event();

  std::map<std::string, std::string> allowed_;  // raw 32-byte key -> name
  std::string monitor_endpoint_;
  zmq::socket_t zap_;
  zmq::socket_t monitor_;
  std::string last_peer_ = "unknown";  // address of the latest accepted connection
  std::atomic<uint64_t> accepted_{0}, refused_{0}, failed_{0}, open_{0};
  std::jthread thread_;  // last: joined before the sockets close
};

}  // namespace geotrain::wire
