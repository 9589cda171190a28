#include "wire/metrics_endpoint.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>

#include "core/check_zmq.hpp"
#include "core/error_types.hpp"

namespace geotrain::wire {

namespace {
std::string http_response(std::string_view status, std::string_view content_type,
                          const std::string& body, bool head) {
  std::string out = fmt::format(
      "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", status,
      content_type, body.size());
  if (!head) out += body;
  return out;
}
}  // namespace

MetricsEndpoint::MetricsEndpoint(Context& context, const std::string& host, uint16_t port)
    : socket_(context.zmq(), zmq::socket_type::stream), host_(host) {
  void* s = socket_.handle();
  int linger = 0;
  GT_ZMQ_CHECK(zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger));
  const auto endpoint =
      port == 0 ? fmt::format("tcp://{}:*", host) : fmt::format("tcp://{}:{}", host, port);
  if (zmq_bind(s, endpoint.c_str()) != 0)  // name the key: a taken port is a config problem
    throw SystemError("zmq", fmt::format("zmq_bind({}) for server.metrics_port", endpoint),
                      __FILE__, __LINE__, zmq_strerror(zmq_errno()));
  char last[256];
  size_t len = sizeof last;
  GT_ZMQ_CHECK(zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, last, &len));
  const std::string_view bound(last);
  const auto colon = bound.rfind(':');
  unsigned value = 0;
  std::from_chars(bound.data() + colon + 1, bound.data() + bound.size(), value);
  port_ = static_cast<uint16_t>(value);
}

std::string MetricsEndpoint::url() const {
  const auto host = host_ == "0.0.0.0" || host_ == "*" ? std::string("localhost") : host_;
  return fmt::format("http://{}:{}/metrics", host, port_);
}

size_t MetricsEndpoint::serve(const std::function<std::string()>& render) {
  size_t answered = 0;
  std::string body;
  bool rendered = false;
  for (;;) {
    zmq::message_t id, data;
    if (!socket_.recv(id, zmq::recv_flags::dontwait)) break;
    // A ZMQ_STREAM message is always [routing id, data].
    if (!id.more() || !socket_.recv(data, zmq::recv_flags::dontwait)) continue;
    const std::string key = id.to_string();
    auto it =
        std::find_if(open_.begin(), open_.end(), [&](const Connection& c) { return c.id == key; });
    if (data.size() == 0) {  // a connection opened or closed: forget what it sent
      if (it != open_.end()) open_.erase(it);
      continue;
    }
    if (it == open_.end()) {
      if (open_.size() >= kMaxConnections) {
        close(open_.front().id);
        open_.pop_front();
      }
      it = open_.insert(open_.end(), Connection{key, {}});
    }
    it->request.append(static_cast<const char*>(data.data()), data.size());
    const bool complete = it->request.find("\r\n\r\n") != std::string::npos ||
                          it->request.find("\n\n") != std::string::npos;
    if (!complete && it->request.size() <= kMaxRequestBytes) continue;
    const std::string request = complete ? std::move(it->request) : std::string();
    open_.erase(it);
    if (complete) {
      respond(key, request, render, body, rendered);
    } else {
      send(key, http_response("431 Request Header Fields Too Large", "text/plain",
                              "request headers too large\n", false));
    }
    close(key);
    ++answered;
  }
  return answered;
}

void MetricsEndpoint::respond(const std::string& id, const std::string& request,
                              const std::function<std::string()>& render, std::string& body,
                              bool& rendered) {
  // The request line: METHOD SP TARGET SP VERSION.
  const auto line = std::string_view(request).substr(0, request.find_first_of("\r\n"));
  const auto sp1 = line.find(' ');
  const auto sp2 = line.find(' ', sp1 == std::string_view::npos ? sp1 : sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos) {
    send(id, http_response("400 Bad Request", "text/plain", "malformed request line\n", false));
    return;
  }
  const auto method = line.substr(0, sp1);
  auto target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  target = target.substr(0, target.find('?'));
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    send(id, http_response("405 Method Not Allowed", "text/plain", "only GET and HEAD\n", false));
    return;
  }
  if (target != "/metrics" && target != "/") {
    send(id, http_response("404 Not Found", "text/plain", "the metrics are at /metrics\n", head));
    return;
  }
  if (!rendered) {
    body = render();
    rendered = true;
  }
  send(id, http_response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body, head));
}

void MetricsEndpoint::send(const std::string& id, const std::string& bytes) {
  // Would-block (a scraper that does not read) drops the reply: the scrape times out, the
  // server loop never waits.
  if (!socket_.send(zmq::buffer(id), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return;
  if (!socket_.send(zmq::buffer(bytes), zmq::send_flags::dontwait))
    spdlog::debug("metrics endpoint: a reply was dropped (the scraper is not reading)");
}

void MetricsEndpoint::close(const std::string& id) {
  // [routing id, empty frame] closes the TCP connection once what was queued has been sent.
  if (socket_.send(zmq::buffer(id), zmq::send_flags::sndmore | zmq::send_flags::dontwait))
    socket_.send(zmq::message_t(), zmq::send_flags::dontwait);
}

}  // namespace geotrain::wire
