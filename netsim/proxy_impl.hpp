// Internals of WanProxy (private to netsim/proxy*.cpp): the state of links, lanes,
// connections and their pipes, and the event loop that moves bytes between them.
// Everything here is touched only by the event-loop thread, except the atomic counters, which
// stats() reads from any thread.
#pragma once

#include <sys/epoll.h>

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <fstream>
#include <optional>
#include <queue>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "netsim/proxy.hpp"
#include "netsim/socket.hpp"
#include "netsim/token_bucket.hpp"

namespace geotrain::netsim {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

inline constexpr std::size_t kReadMax = std::size_t{256} << 10;  // bytes per recv

struct LaneCounters {
  std::atomic<uint64_t> bytes{0}, chunks{0}, queue_ns_sum{0}, queue_ns_max{0};
};

// One direction of a link: 0 = forward (client -> target), 1 = reverse.
struct Lane {
  std::optional<TokenBucket> bucket;  // empty: unlimited bandwidth
  std::mt19937_64 rng;
  LaneCounters counters;
};

struct Link {
  LinkConfig config;  // properties change with `set` faults
  Fd listener;
  uint16_t port = 0;
  std::array<Lane, 2> lanes;
  bool partitioned = false;
  bool blackhole = false;
  std::unordered_set<uint64_t> connections;
  std::atomic<uint64_t> open{0}, total{0}, dropped{0};
  std::ofstream capture;  // config.capture_file, when set: every byte read, both directions
};

struct Chunk {
  std::vector<char> data;
  std::size_t offset = 0;
  TimePoint deliver_at;
  bool eof = false;  // a FIN to pass on once delivered (always the last chunk)
};

// The bytes of one direction of one connection, from its source socket to its destination.
struct Pipe {
  std::deque<Chunk> queue;                             // ordered by deliver_at
  std::deque<std::pair<TimePoint, std::size_t>> acks;  // window: when bytes leave the window
  std::size_t inflight = 0;  // window accounting: read, not yet acknowledged
  std::size_t pending = 0;   // read, not yet written to the destination
  TimePoint last_delivery{};
  bool src_eof = false;
  bool eof_sent = false;
  bool blocked = false;            // destination socket is full: wait for EPOLLOUT
  std::optional<TimePoint> armed;  // earliest timer queued for this pipe
  // Zero-delay fast path: bytes move src -> kernel pipe -> dst with splice(2), never copied to
  // user space. `spliced` bytes sit in the pipe; they precede everything in `queue`.
  Fd splice_r, splice_w;
  std::size_t spliced = 0;
};

struct Connection {
  uint64_t id = 0;
  Link* link = nullptr;
  Fd client, upstream;
  bool connecting = true;
  bool blackholed = false;
  std::array<Pipe, 2> pipes;           // 0: client -> upstream, 1: upstream -> client
  std::array<uint32_t, 2> interest{};  // epoll events registered for client, upstream

  int src(int p) const { return p == 0 ? client.get() : upstream.get(); }
  int dst(int p) const { return p == 0 ? upstream.get() : client.get(); }
};

enum class FaultAction { partition_on, partition_off, reset, set, blackhole_on, blackhole_off };

struct FaultEvent {
  double at_s = 0;
  std::size_t link = 0;
  FaultAction action = FaultAction::reset;
  Fault fault;
};

struct Timer {
  TimePoint at;
  enum class Kind { pipe, fault, stats } kind = Kind::pipe;
  uint64_t conn = 0;      // pipe
  int pipe = 0;           // pipe
  std::size_t index = 0;  // fault event
  uint64_t seq = 0;       // set by schedule(): timers due at the same time fire in that order
  bool operator>(const Timer& o) const { return at != o.at ? at > o.at : seq > o.seq; }
};

struct WanProxy::Impl {
  Impl(std::vector<LinkConfig> links, ProxyOptions options);
  ~Impl();

  void run();  // the event loop thread's body
  void stop_loop();
  std::vector<LinkStats> snapshot() const;

  // proxy.cpp: loop, listeners, faults, stats
  void on_accept(std::size_t link_index);
  void on_fault(std::size_t index);
  void on_stats();
  // First in, first out among timers due at the same time: one that is re-armed for the time
  // it fired at goes behind the others due then, so none of them waits for ever.
  void schedule(Timer t) {
    t.seq = next_timer_seq++;
    timers.push(t);
  }

  // pipe.cpp: moving bytes
  void on_socket_event(Connection& c, int side, uint32_t events);
  void on_readable(Connection& c, int p);
  void deliver(Connection& c, int p);
  // Writes the pipe's spliced bytes to the destination; false when the connection was closed.
  bool flush_spliced(Connection& c, int p);
  void arm_pipe(Connection& c, int p);
  void update_interest(Connection& c);
  std::size_t read_room(const Connection& c, int p) const;
  // Closes c: with RST (`abort`) or normally. Invalidates c.
  void close_connection(Connection& c, bool abort);
  void maybe_finish(Connection& c);
  void blackhole_connection(Connection& c);

  std::vector<std::unique_ptr<Link>> links;
  ProxyOptions options;
  Fd epoll, wake;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections;
  uint64_t next_id = 1;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers;
  uint64_t next_timer_seq = 0;
  std::vector<FaultEvent> fault_events;
  std::vector<char> scratch;
  TimePoint started{};
  // Time 0 of the fault schedule: `started`, or options.faults_origin_unix_s.
  TimePoint faults_origin{};
  std::atomic<bool> stopping{false};
  std::thread thread;
  std::ofstream stats_out;
  std::vector<LinkStats> last_report;
  TimePoint last_report_at{};
};

}  // namespace geotrain::netsim
