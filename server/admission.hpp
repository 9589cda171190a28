// Admission: who may connect to a region's server, wired into its ROUTER socket's options.
// With security.curve on, the socket is a CURVE server with the region's server key and a
// ZapAuthenticator (its own ZAP thread) admits only the configured regions' client keys; with
// server.max_connections_per_address the same handler refuses a handshake from an address that
// holds more open connections, CURVE or not. A server owns its context's ZAP handler unless it is
// given one (tests run several servers in one context); where the address is taken, CURVE is an
// error and the cap alone is only not enforced (logged).
#pragma once

#include <cstdint>
#include <memory>

#include "server/config.hpp"
#include "wire/channel.hpp"
#include "wire/context.hpp"
#include "wire/zap_authenticator.hpp"

namespace geotrain::server {

struct Admission {
  std::unique_ptr<wire::ZapAuthenticator> own;      // the handler this server made, if it made one
  wire::ZapAuthenticator* authenticator = nullptr;  // own or the one given; null: none
  bool curve = false;                               // security.curve on
};

// The admission of region `region`'s server, and the CURVE server key, connection monitor and
// ZAP domain it needs set in `channel`. `given`: a handler of `context` to use (null: make one).
Admission admit_clients(const ServerConfig& config, uint32_t region, wire::Context& context,
                        wire::ZapAuthenticator* given, wire::ChannelOptions& channel);

}  // namespace geotrain::server
