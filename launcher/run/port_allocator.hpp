// PortAllocator: hands out loopback TCP ports for one deployment on this machine.
//
// With a base port, ports are tried upwards from it; otherwise the kernel picks ephemeral ones.
// Every port handed out is checked by binding it, and the probe sockets stay open (so no port
// is handed out twice) until release() or destruction; a child then binds the port for real.
// The ports also stay reserved in this process until the allocator is destroyed, so a
// deployment that keeps its allocator for its life shares no port with another deployment of
// the same process (`geotrain sweep --jobs`), whose allocator skips them. There is still a short
// window between release() and the child's bind in which another program could take the port:
// the health check (port_listening with the child's pid) then fails, naming the process.
// Owns the probe sockets and the reservation (RAII). One allocator is not thread-safe; several
// may be used from several threads. Calls do not block.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace geotrain::launcher {

class PortAllocator {
 public:
  explicit PortAllocator(uint16_t base_port = 0, std::string host = "127.0.0.1");
  ~PortAllocator();
  PortAllocator(const PortAllocator&) = delete;
  PortAllocator& operator=(const PortAllocator&) = delete;

  // A port free on `host` right now and held by no other allocator of this process; SystemError
  // when none can be found.
  uint16_t allocate();
  // Closes the probe sockets, so that children can bind the ports. They stay reserved in this
  // process until destruction.
  void release();

 private:
  // `port` (just bound by a probe) for this allocator, unless another allocator of this process
  // holds it; true when taken.
  bool reserve(uint16_t port);

  uint16_t next_;
  std::string host_;
  std::vector<int> probes_;
  std::vector<uint16_t> reserved_;  // every port handed out, until destruction
};

// True when a TCP connection to host:port is accepted within `timeout_ms`.
bool port_accepts(const std::string& host, uint16_t port, int timeout_ms = 200);

// True when a TCP socket of process `pid` listens on `port` (any local address, IPv4 or IPv6):
// the socket's inode from /proc/net/tcp{,6}, found among /proc/<pid>/fd. A readiness check that
// opens no connection (a server's log shows no handshake cut short by it, netsim opens no
// upstream connection for it), and that another program listening on the port cannot pass.
bool port_listening(uint16_t port, pid_t pid);
// A child's health: process `pid` listens on every one of `ports`.
bool ports_listening(const std::vector<uint16_t>& ports, pid_t pid);

}  // namespace geotrain::launcher
