// `geotrain bench wan`: one leader's exchange with a remote server across one emulated WAN link
// (a real WanProxy on loopback with a profile's link), through the same channel the product uses
// (wire/channel.hpp: ZeroMQ, striped over N connections, CURVE or plain). For each stream count
// and security mode: a payload pushed to the server (until its acknowledgement) and one pulled
// back (from the request), each timed, against the link's bandwidth and against the single-flow
// limit window / RTT. Rates are over the transfer: the time less one round trip (the request's
// or the acknowledgement's flight, which no stream count shortens); the JSON has the whole
// exchange's rate too (`*_exchange_mbps`). The payload is what a codec makes of `elements` values
// (fp32: 4 bytes each). Blocks until done; prints a table or one JSON document to stdout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace geotrain::bench {

struct WanBenchOptions {
  std::string profile = "global-3";  // a name in the source tree's configs/wan, or a path
  std::string from, to;              // the link; empty: the profile's longest-RTT link
  uint64_t elements = 6'666'667;     // a third of an 80 MB fp32 model: one server's share
  std::string codec = "fp32";
  std::vector<uint32_t> streams{1, 2, 4, 8, 16};
  std::vector<std::string> security{"plain", "curve"};
  int repeats = 2;            // transfers per direction and setting; the median is reported
  int io_threads = 1;         // ZeroMQ I/O threads of each end's context
  int socket_buffer_kib = 0;  // both ends; 0: the OS default
  bool json = false;
};

int run_wan_bench(const WanBenchOptions& options);

}  // namespace geotrain::bench
