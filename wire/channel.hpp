// Channel: the small transport interface the protocol runs over (STYLE.md, principle 3).
// Servers bind a ROUTER channel, region leaders connect a DEALER channel; the same code runs
// over tcp:// (and through the netsim proxy) and inproc:// in tests.
//
// Owns: one ZeroMQ socket (RAII; the zmq::context_t is the caller's and must outlive it).
// Blocking: receive() waits up to its timeout; send() never blocks (it returns false when the
// peer's queue is at its high-water mark, an expected outcome). Not thread-safe: one thread per
// channel, like the socket under it. Frames are moved in and out, so payloads are never copied.
//
// Limits bound what a flooding peer can make us hold: ZMQ_MAXMSGSIZE caps every frame,
// ZMQ_RCVHWM/ZMQ_SNDHWM cap queued messages; ROUTER_MANDATORY makes sends to a peer that is gone
// report failure instead of vanishing. ZMQ_HANDSHAKE_IVL (handshake_ms) closes a connection that
// has not completed its ZMTP (and CURVE) handshake in time, so idle connections cannot pile up.
//
// CURVE (wire/curve_keys.hpp): a ROUTER with `curve_server` is a CURVE server (a ZAP handler,
// wire/zap_authenticator.hpp, must already be bound in the context); a DEALER with
// `curve_client` connects as a CURVE client. `monitor_endpoint` attaches a socket monitor for
// handshake and connection events (read by ZapAuthenticator).
#pragma once

#include <zmq.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace geotrain::wire {

struct Envelope {
  std::string peer;                    // ROUTER: the sender's routing id; DEALER: empty
  std::vector<zmq::message_t> frames;  // frame 0: header; then payload frames
};

struct ChannelOptions {
  int send_hwm = 64;  // messages queued per peer before send() says no
  int receive_hwm = 64;
  int64_t max_frame_bytes = int64_t{1} << 30;  // ZMQ_MAXMSGSIZE: larger frames drop the peer
  size_t max_frames = 4096;                    // frames per message accepted by receive()
  std::chrono::milliseconds linger{0};
  int handshake_ms = -1;  // ZMQ_HANDSHAKE_IVL; -1: libzmq's default (30 s)

  struct CurveServer {
    std::string secret_key;  // Z85: this server's secret key
  };
  struct CurveClient {
    std::string server_public_key;  // Z85: the server this socket connects to
    std::string public_key;         // Z85: this client's keypair
    std::string secret_key;
  };
  std::optional<CurveServer> curve_server;  // ROUTER only
  std::optional<CurveClient> curve_client;  // DEALER only
  std::string monitor_endpoint;             // empty: no monitor
  // ROUTER without CURVE: ask the context's ZAP handler about NULL clients too (a ZAP domain;
  // wire/zap_authenticator.hpp, bound in the context first), e.g. for its connection cap.
  bool zap_null = false;
};

class Channel {
 public:
  virtual ~Channel() = default;
  Channel() = default;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // The endpoint actually bound or connected (tcp://127.0.0.1:0 resolves to the real port).
  virtual std::string endpoint() const = 0;
  // Queues one multipart message; false when it would block (HWM) or the peer is unknown.
  virtual bool send(Envelope&& message) = 0;
  // One whole multipart message, or nullopt after `timeout`. A message with more than
  // max_frames frames is drained and returned as its first max_frames + 1 frames, so the
  // receiver can refuse it by frame count.
  virtual std::optional<Envelope> receive(std::chrono::milliseconds timeout) = 0;
};

// Endpoints must be tcp://host:port, inproc://name or ipc://path (InputError otherwise).
std::unique_ptr<Channel> bind_router(zmq::context_t& context, const std::string& endpoint,
                                     const ChannelOptions& options = {});
std::unique_ptr<Channel> connect_dealer(zmq::context_t& context, const std::string& endpoint,
                                        const ChannelOptions& options = {});

}  // namespace geotrain::wire
