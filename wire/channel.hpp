// Channel: the small transport interface the protocol runs over (STYLE.md, principle 3).
// Servers bind a ROUTER channel, region leaders connect a DEALER channel; the same code runs
// over tcp:// (and through the netsim proxy) and inproc:// in tests.
//
// Owns: one ZeroMQ socket (RAII; the wire::Context is the caller's and must outlive it).
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

#include "wire/context.hpp"
#include "wire/frame.hpp"

namespace geotrain::wire {

struct Envelope {
  std::string peer;           // ROUTER: the sender's routing id; DEALER: empty
  std::vector<Frame> frames;  // frame 0: header; then payload frames
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

  // DEALER: connections to the peer ("lanes", worker.streams_per_server). With more than one, a
  // message is striped over them (wire/stripe.hpp, wire/striped_channel.hpp): over a long-haul
  // link one TCP connection moves at most window / RTT, N connections N windows. 1..64. Every
  // ROUTER channel reassembles striped peers and answers them over their lanes.
  uint32_t lanes = 1;
  // SO_SNDBUF and SO_RCVBUF of every connection (ZMQ_SNDBUF/ZMQ_RCVBUF), bytes; 0: the OS's
  // default and autotuning. The kernel caps it at net.core.wmem_max / rmem_max
  // (effective_socket_buffer() reads what it grants).
  int socket_buffer_bytes = 0;
  // Set by the striped channel on its lanes: the DEALER's routing id (ZMQ_ROUTING_ID).
  std::string routing_id{};
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
  // DEALER channels: how many of their connections broke since they were made (the peer's end
  // reset, or a proxy between them restarted). ZeroMQ reconnects them by itself, but what was
  // on the wire in them is gone: a request sent before may never be answered. 0 for others.
  virtual uint64_t disconnects() { return 0; }
  // Striped channels: messages from the peer given up as lost, whole or in part (a lane of the
  // peer's could not carry a chunk and it sent an abort, or a lane broke): a reply among them will
  // never come. 0 for others.
  virtual uint64_t messages_lost() { return 0; }
  // DEALER: whether a message from the peer is partly here (striped chunks of it): a reply on its
  // way, not lost. One connection delivers a message whole: always false.
  virtual bool receiving() { return false; }
  // Both: what a request waiting for its reply must watch (worker/leader/reply_wait.hpp).
  uint64_t breaks() { return disconnects() + messages_lost(); }
};

// The socket buffer the kernel grants for a request of `requested` bytes (0: the default), for
// each direction: min(requested, net.core.{w,r}mem_max), as Linux caps SO_SNDBUF/SO_RCVBUF.
struct SocketBuffers {
  int64_t send_bytes = 0, receive_bytes = 0;  // 0: the OS default (autotuned)
  int64_t send_max = -1, receive_max = -1;    // the sysctls; -1: unreadable
};
SocketBuffers effective_socket_buffer(int requested);

// Connections to one server that fill a link of `mbps` with round trip `rtt_s` when each moves
// at most `window_bytes` per round trip: ceil(bandwidth x RTT / window), in [1, kMaxAutoStreams]
// (beyond 16, a 2-core machine measured no gain: docs/benchmarks.md, "Filling a long-haul
// link"). No window limit (window_bytes <= 0) or no bandwidth limit: 1.
inline constexpr uint32_t kMaxAutoStreams = 16;
uint32_t streams_for_link(double rtt_s, double mbps, double window_bytes);
// The window one TCP connection of this host gets: the socket buffer asked for (capped at
// net.core.rmem_max), else half of net.ipv4.tcp_rmem's maximum (the share of the receive buffer
// Linux advertises by default); 3 MiB (Debian's default maximum, halved) when unreadable.
double tcp_window_bytes(int socket_buffer_bytes);

// Endpoints must be tcp://host:port, inproc://name or ipc://path (InputError otherwise).
std::unique_ptr<Channel> bind_router(Context& context, const std::string& endpoint,
                                     const ChannelOptions& options = {});
std::unique_ptr<Channel> connect_dealer(Context& context, const std::string& endpoint,
                                        const ChannelOptions& options = {});

}  // namespace geotrain::wire
