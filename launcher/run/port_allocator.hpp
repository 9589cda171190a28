// PortAllocator: hands out loopback TCP ports for one deployment on this machine.
//
// With a base port, ports are tried upwards from it; otherwise the kernel picks ephemeral ones.
// Every port handed out is checked by binding it, and the probe sockets stay open (so no port
// is handed out twice) until release() or destruction; a child then binds the port for real.
// There is a short window between release() and the child's bind in which another program
// could take the port: the launcher then fails at the health check, naming the process.
// Owns the probe sockets (RAII). Not thread-safe; calls do not block.
#pragma once

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

  // A port free on `host` right now; SystemError when none can be found.
  uint16_t allocate();
  // Closes the probe sockets, so that children can bind the ports.
  void release();

 private:
  uint16_t next_;
  std::string host_;
  std::vector<int> probes_;
};

// True when a TCP connection to host:port is accepted within `timeout_ms`.
bool port_accepts(const std::string& host, uint16_t port, int timeout_ms = 200);

// True when a TCP socket of this host listens on `port` (any local address, IPv4 or IPv6), read
// from /proc/net/tcp{,6}: a readiness check that opens no connection, so a server's log shows no
// handshake cut short by it and netsim opens no upstream connection for it.
bool port_listening(uint16_t port);

}  // namespace geotrain::launcher
