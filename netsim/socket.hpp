// POSIX plumbing for netsim: an owning file descriptor (Fd), a check macro for syscalls, and
// the few TCP socket helpers the proxy and the probes need (IPv4, numeric addresses).
//
// Fd is move-only and closes on destruction. GT_SYS_CHECK throws SystemError ("posix") with
// file:line, the expression and strerror(errno) when a call returns -1. Functions here do not
// block unless they say so. Thread-safe in the sense that they share no state.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "netsim/link.hpp"

namespace geotrain::netsim {

namespace detail {
[[noreturn]] void throw_errno(const char* expr, const char* file, int line);
template <typename T>
T sys_check(T rc, const char* expr, const char* file, int line) {
  if (rc == T(-1)) [[unlikely]]
    throw_errno(expr, file, line);
  return rc;
}
}  // namespace detail

#define GT_SYS_CHECK(expr) ::geotrain::netsim::detail::sys_check((expr), #expr, __FILE__, __LINE__)

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// "host:port" -> Endpoint; throws InputError naming `field` and the value when malformed.
Endpoint parse_endpoint(const std::string& text, const std::string& field);
std::string to_string(const Endpoint& e);

// A listening TCP socket (SO_REUSEADDR, backlog 512), non-blocking when asked.
Fd listen_tcp(const Endpoint& at, bool nonblocking);
// The port a bound socket got (for port 0 binds).
uint16_t local_port(int fd);
// Starts a non-blocking connect; the socket becomes writable when it completes (check with
// take_socket_error). Throws SystemError only for failures that are not EINPROGRESS.
Fd connect_tcp_nonblocking(const Endpoint& to);
// Blocking connect (for probes and tests).
Fd connect_tcp(const Endpoint& to);
// SO_ERROR of the socket (0 when fine), clearing it.
int take_socket_error(int fd);
void set_nodelay(int fd);
// Makes close() send RST instead of FIN (SO_LINGER 0): how the proxy cuts connections.
void set_linger_zero(int fd);

// Blocking helpers for probes: send/recv all bytes; recv_all returns false on EOF first.
void send_all(int fd, const void* data, std::size_t n);
bool recv_all(int fd, void* data, std::size_t n);

}  // namespace geotrain::netsim
