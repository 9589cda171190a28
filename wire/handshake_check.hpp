// check_handshakes: whether servers accept a client's connection at all, before its first
// request, so that a refused client fails at once with the reason instead of timing out.
//
// Why: a CURVE server (wire/zap_authenticator.hpp) refuses a client with no keys, with a client
// key not in its allow-list or with a wrong server public key during the ZMTP handshake; the
// client's DEALER then reconnects and retries for ever, and its requests go unanswered until the
// caller's timeout says only "the server is silent". This connects one probe DEALER per server
// with the same CURVE client options as the real link, reads its socket monitor, and reports per
// server: the handshake succeeded, was refused (with libzmq's reason in words), or neither
// happened before the deadline (server down or unreachable: the caller's usual timeout error).
//
// Refusals that only a wrong configuration explains end the wait for that server at once: the
// server's authenticator refused the key, the mechanisms differ (CURVE on one side only), or a
// CURVE message failed to decrypt. A connection closed during the handshake without a reason is
// also what a wrong server key looks like from the client (the server cannot decrypt our HELLO
// and hangs up), but a proxy in front of a server that is down does the same, so it counts as a
// refusal only after `closed_limit` such closes in a row.
//
// Blocking: up to `timeout`, all servers probed in parallel. Owns its probe sockets for the call
// only (closed before it returns); the context is the caller's. Thread-safe as a plain function.
#pragma once

#include <zmq.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "wire/channel.hpp"
#include "wire/context.hpp"

namespace geotrain::wire {

struct HandshakeTarget {
  std::string name;      // how messages name the server ("the server of region eu")
  std::string endpoint;  // tcp://host:port (through netsim or not)
  std::optional<ChannelOptions::CurveClient> curve;  // nullopt: plain (NULL mechanism)
};

enum class HandshakeOutcome { succeeded, refused, no_answer };

struct HandshakeResult {
  HandshakeOutcome outcome = HandshakeOutcome::no_answer;
  std::string reason;  // refused: why, in words that name the likely fix
  int closed = 0;      // connections closed during the handshake (any outcome)
};

std::vector<HandshakeResult> check_handshakes(Context& context,
                                              const std::vector<HandshakeTarget>& targets,
                                              std::chrono::milliseconds timeout,
                                              int closed_limit = 5);

}  // namespace geotrain::wire
