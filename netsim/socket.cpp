#include "netsim/socket.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace geotrain::netsim {

namespace detail {
void throw_errno(const char* expr, const char* file, int line) {
  const int err = errno;
  throw SystemError("posix", expr, file, line,
                    fmt::format("{} (errno {})", std::strerror(err), err));
}
}  // namespace detail

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

namespace {
sockaddr_in to_sockaddr(const Endpoint& e) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(e.port);
  GT_REQUIRE(::inet_pton(AF_INET, e.host.c_str(), &a.sin_addr) == 1,
             "address '{}' is not a numeric IPv4 address", e.host);
  return a;
}
}  // namespace

Endpoint parse_endpoint(const std::string& text, const std::string& field) {
  const auto colon = text.rfind(':');
  GT_REQUIRE(colon != std::string::npos && colon > 0,
             "{} is '{}', must be HOST:PORT with a numeric IPv4 host, e.g. 127.0.0.1:7000", field,
             text);
  Endpoint e;
  e.host = text.substr(0, colon);
  unsigned port = 0;
  const char* first = text.data() + colon + 1;
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(first, last, port);
  GT_REQUIRE(ec == std::errc() && ptr == last && first != last && port <= 65535,
             "{} is '{}': port must be a number from 0 to 65535", field, text);
  in_addr probe{};
  GT_REQUIRE(::inet_pton(AF_INET, e.host.c_str(), &probe) == 1,
             "{} is '{}': host '{}' is not a numeric IPv4 address", field, text, e.host);
  e.port = static_cast<uint16_t>(port);
  return e;
}

std::string to_string(const Endpoint& e) { return fmt::format("{}:{}", e.host, e.port); }

Fd listen_tcp(const Endpoint& at, bool nonblocking) {
  const int flags = SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0);
  Fd fd(GT_SYS_CHECK(::socket(AF_INET, flags, 0)));
  int one = 1;
  GT_SYS_CHECK(::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
  sockaddr_in a = to_sockaddr(at);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int err = errno;
    throw SystemError("posix", "bind", __FILE__, __LINE__,
                      fmt::format("cannot bind {}: {}", to_string(at), std::strerror(err)));
  }
  GT_SYS_CHECK(::listen(fd.get(), 512));
  return fd;
}

uint16_t local_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  GT_SYS_CHECK(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len));
  return ntohs(a.sin_port);
}

Fd connect_tcp_nonblocking(const Endpoint& to) {
  Fd fd(GT_SYS_CHECK(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)));
  sockaddr_in a = to_sockaddr(to);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS)
    GT_SYS_CHECK(-1);
  return fd;
}

Fd connect_tcp(const Endpoint& to) {
  Fd fd(GT_SYS_CHECK(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)));
  sockaddr_in a = to_sockaddr(to);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    const int err = errno;
    throw SystemError("posix", "connect", __FILE__, __LINE__,
                      fmt::format("cannot connect to {}: {}", to_string(to), std::strerror(err)));
  }
  set_nodelay(fd.get());
  return fd;
}

int take_socket_error(int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  GT_SYS_CHECK(::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len));
  return err;
}

void set_nodelay(int fd) {
  int one = 1;
  GT_SYS_CHECK(::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one));
}

void set_linger_zero(int fd) {
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);  // best effort: the fd is closing
}

void send_all(int fd, const void* data, std::size_t n) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    GT_SYS_CHECK(w);
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

bool recv_all(int fd, void* data, std::size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    GT_SYS_CHECK(r);
    if (r == 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

}  // namespace geotrain::netsim
