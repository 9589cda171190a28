// MetricsEndpoint: a minimal HTTP/1.x server for `GET /metrics` (Prometheus text format), on a
// ZeroMQ ZMQ_STREAM socket, so that it needs no library beyond the ZeroMQ the server already has
// (docs/monitoring.md).
//
// serve() never blocks: it reads what has arrived, and answers each complete request (headers
// up to the blank line) with the text `render` returns - called at most once per serve(), and
// only when some request is complete - then closes that connection (`Connection: close`; a
// scraper opens one connection per scrape). Anything but GET or HEAD gets 405, any path but
// /metrics (and /) 404, a request whose headers exceed kMaxRequestBytes 431. At most
// kMaxConnections partial requests are kept; beyond that the oldest is closed.
//
// Owns its socket. Not thread-safe: the server loop calls serve() between messages, so the
// metrics it renders need no locks; a scrape waits at most one loop tick.
#pragma once

#include <zmq.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <string>

#include "wire/context.hpp"

namespace geotrain::wire {

class MetricsEndpoint {
 public:
  static constexpr size_t kMaxRequestBytes = 8192;
  static constexpr size_t kMaxConnections = 64;

  // Binds tcp://host:port (port 0: any free port). SystemError if the port cannot be bound.
  MetricsEndpoint(Context& context, const std::string& host, uint16_t port);

  uint16_t port() const { return port_; }
  std::string url() const;  // http://host:port/metrics

  // Answers every complete request that has arrived. Returns how many were answered.
  size_t serve(const std::function<std::string()>& render);

 private:
  struct Connection {
    std::string id;       // the ZMQ_STREAM routing id
    std::string request;  // bytes received so far
  };

  void respond(const std::string& id, const std::string& request,
               const std::function<std::string()>& render, std::string& body, bool& rendered);
  void send(const std::string& id, const std::string& bytes);
  void close(const std::string& id);

  zmq::socket_t socket_;
  std::string host_;
  uint16_t port_ = 0;
  std::list<Connection> open_;  // partial requests, oldest first
};

}  // namespace geotrain::wire
