#include "launcher/run/port_allocator.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>

#include "core/error.hpp"

namespace geotrain::launcher {

namespace {
sockaddr_in make_address(const std::string& host, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  GT_REQUIRE(::inet_pton(AF_INET, host.c_str(), &a.sin_addr) == 1,
             "host '{}' is not a numeric IPv4 address", host);
  return a;
}

// A bound socket on host:port (0 = ephemeral), or -1 when the port is taken.
int bind_probe(const std::string& host, uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    throw SystemError("socket", "socket(AF_INET)", __FILE__, __LINE__, std::strerror(errno));
  const auto a = make_address(host, port);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The ports every live allocator of this process has handed out.
std::mutex reserved_mutex;
std::set<uint16_t> reserved_ports;
}  // namespace

PortAllocator::PortAllocator(uint16_t base_port, std::string host)
    : next_(base_port), host_(std::move(host)) {}

PortAllocator::~PortAllocator() {
  release();
  const std::lock_guard lock(reserved_mutex);
  for (uint16_t port : reserved_) reserved_ports.erase(port);
}

bool PortAllocator::reserve(uint16_t port) {
  const std::lock_guard lock(reserved_mutex);
  if (!reserved_ports.insert(port).second) return false;
  reserved_.push_back(port);
  return true;
}

uint16_t PortAllocator::allocate() {
  if (next_ == 0) {
    // The kernel may hand out a port that another allocator of this process released to its
    // child: such probes stay open until a free one comes, so that it is not offered again.
    std::vector<int> held;
    const auto close_held = [&] {
      for (int fd : held) ::close(fd);
    };
    for (;;) {
      const int fd = bind_probe(host_, 0);
      if (fd < 0) {
        close_held();
        throw SystemError("socket", "bind(port 0)", __FILE__, __LINE__, std::strerror(errno));
      }
      sockaddr_in a{};
      socklen_t len = sizeof a;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
      const uint16_t port = ntohs(a.sin_port);
      if (!reserve(port)) {
        held.push_back(fd);
        continue;
      }
      close_held();
      probes_.push_back(fd);
      return port;
    }
  }
  for (uint32_t port = next_; port <= 65535; ++port) {
    const int fd = bind_probe(host_, static_cast<uint16_t>(port));
    if (fd < 0) continue;
    if (!reserve(static_cast<uint16_t>(port))) {
      ::close(fd);
      continue;
    }
    probes_.push_back(fd);
    next_ = static_cast<uint16_t>(port == 65535 ? 65535 : port + 1);
    return static_cast<uint16_t>(port);
  }
  throw SystemError("socket", "bind", __FILE__, __LINE__,
                    fmt::format("no free port from {} up", next_));
}

void PortAllocator::release() {
  for (int fd : probes_) ::close(fd);
  probes_.clear();
}

bool port_accepts(const std::string& host, uint16_t port, int timeout_ms) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  const auto a = make_address(host, port);
  bool ok = false;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) {
    ok = true;
  } else if (errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, timeout_ms) == 1) {
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      ok = err == 0;
    }
  }
  ::close(fd);
  return ok;
}

namespace {
// The inodes of the sockets listening on `port` in one /proc/net/tcp{,6} table: "sl
// local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...", the local address
// as hex "ADDR:PORT", the state as hex (0A: LISTEN).
void listeners_in(const char* table, uint16_t port, std::vector<std::string>& inodes) {
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    if (!(fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode))
      continue;
    const auto colon = local.rfind(':');
    if (colon == std::string::npos || state != "0A") continue;
    if (std::stoul(local.substr(colon + 1), nullptr, 16) == port) inodes.push_back(inode);
  }
}

std::vector<std::string> listeners(uint16_t port) {
  std::vector<std::string> inodes;
  listeners_in("/proc/net/tcp", port, inodes);
  listeners_in("/proc/net/tcp6", port, inodes);
  return inodes;
}
}  // namespace

bool port_listening(uint16_t port, pid_t pid) {
  const auto inodes = listeners(port);
  if (inodes.empty()) return false;
  // The process may be gone or its fds changing: an error reads as not (yet) listening.
  std::error_code ec;
  std::filesystem::directory_iterator fd(fmt::format("/proc/{}/fd", pid), ec), end;
  for (; !ec && fd != end; fd.increment(ec)) {
    std::error_code link_ec;
    const auto target = std::filesystem::read_symlink(fd->path(), link_ec).string();
    if (link_ec) continue;
    for (const auto& inode : inodes)
      if (target == "socket:[" + inode + "]") return true;
  }
  return false;
}

bool ports_listening(const std::vector<uint16_t>& ports, pid_t pid) {
  return std::all_of(ports.begin(), ports.end(),
                     [pid](uint16_t port) { return port_listening(port, pid); });
}

}  // namespace geotrain::launcher
