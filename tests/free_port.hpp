// free_port(): a loopback TCP port for a test's server to bind (tests/integration's processes,
// the server suites' TCP cases).
#pragma once

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

namespace geotrain::test {

// A loopback port nobody listens on right now, below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, 32768-60999 by default): the kernel hands the ports of that
// range to every outgoing connection's local end and to bind(0), so one picked there and bound
// by a process seconds later may have been taken meanwhile (test_slurm, 2026-11-29: a server's
// bind "Address already in use"); below it, only another explicit bind can take it. Random in
// [20000, 32000), so that parallel tests rarely pick alike, and checked by a bind now.
inline int free_port() {
  static std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(20000, 31999);
  for (int tries = 0; tries < 1000; ++tries) {
    const int port = pick(rng);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    close(fd);
    if (free) return port;
  }
  FAIL("no free loopback port in [20000, 32000) after 1000 tries");
  return 0;
}

}  // namespace geotrain::test
