// Loopback probes for measuring a link: a TCP echo server, a sink that verifies a known byte
// pattern, and blocking clients that time round trips and bulk transfers through any TCP
// address (a netsim link or the server itself). Used by the tests and `geotrain bench netsim`.
//
// Servers own one accept thread plus one thread per connection (probes use few connections);
// they bind 127.0.0.1:0 and stop in their destructors. All client functions block.
// The byte pattern is addressable by offset, so a sink checks every byte it receives, in
// order: loss, duplication, reordering and corruption all break `intact`.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "netsim/link.hpp"
#include "netsim/socket.hpp"

namespace geotrain::netsim {

// Byte `offset + i` of the stream with this seed goes to out[i].
void fill_pattern(uint64_t seed, uint64_t offset, std::span<char> out);

// Accepts connections on 127.0.0.1:0 and runs `serve(fd)` on a thread per connection.
class LoopbackServer {
 public:
  explicit LoopbackServer(std::function<void(int fd)> serve);
  ~LoopbackServer();
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;
  Endpoint endpoint() const { return {"127.0.0.1", port_}; }

 private:
  std::function<void(int)> serve_;
  Fd listener_;
  uint16_t port_ = 0;
  std::mutex mutex_;
  std::vector<Fd> conns_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

// Echoes every byte back until the client closes.
std::unique_ptr<LoopbackServer> make_echo_server();

struct FlowResult {
  uint64_t bytes = 0;
  bool intact = true;  // every byte matched the pattern at its offset
  std::vector<std::pair<double, uint64_t>> timeline;  // (seconds since epoch_s, bytes so far)
};

// Receives pattern streams (seed given at construction), one FlowResult per connection.
class PatternSink {
 public:
  explicit PatternSink(uint64_t seed, bool verify = true);
  Endpoint endpoint() const { return server_->endpoint(); }
  bool verifies() const { return verify_; }
  // Waits until `n` connections have finished (EOF), up to timeout_s; returns those finished.
  std::vector<FlowResult> wait(std::size_t n, double timeout_s);

 private:
  uint64_t seed_;
  bool verify_;
  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<FlowResult> results_;
  std::unique_ptr<LoopbackServer> server_;
};

double now_s();  // steady clock, seconds: the time base of FlowResult::timeline

// Round trips of `bytes`-sized messages through `via` (to an echo server), in milliseconds.
std::vector<double> measure_rtts_ms(const Endpoint& via, int count, std::size_t bytes = 64);

// Sends `bytes` of the pattern over each of `flows` connections to `via` at full speed, then
// closes and waits for the sink to see all of it. When the sink does not verify, the senders
// skip generating the pattern (for measuring forwarding cost, not the generator's).
struct BulkResult {
  uint64_t bytes = 0;      // received, all flows
  bool intact = false;     // every flow complete and exact
  double seconds = 0;      // first byte to last byte
  double steady_mbps = 0;  // rate while the 10%..90% of bytes arrived (skips burst, tail)
  std::vector<std::pair<double, uint64_t>> arrivals;  // (now_s() time, bytes) per recv, sorted
};
BulkResult bulk_transfer(const Endpoint& via, PatternSink& sink, uint64_t bytes, int flows,
                         uint64_t seed, double timeout_s);

// Mean rate (Mbit/s) over a whole number of `period_s` periods, starting when 10% of the bytes
// had arrived. A window-limited flow arrives in bursts, one window per RTT; measured over whole
// RTTs its rate is exact, where a rate between two arbitrary arrivals would depend on where in
// a burst they fall. Returns 0 when the arrivals span less than one period.
double rate_over_periods_mbps(const std::vector<std::pair<double, uint64_t>>& arrivals,
                              double period_s);

double median(std::vector<double> v);

}  // namespace geotrain::netsim
