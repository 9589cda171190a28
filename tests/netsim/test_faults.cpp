// The fault schedule (partition, reset, blackhole, property changes) and the statistics.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <sys/time.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "tests/netsim/netsim_test_util.hpp"

namespace geotrain::netsim::test {

namespace {
Fault fault(FaultKind kind, double at_s, std::optional<double> until_s = std::nullopt) {
  Fault f;
  f.kind = kind;
  f.at_s = at_s;
  f.until_s = until_s;
  return f;
}
}  // namespace

TEST_CASE(
    "a partition stops delivery for its duration, then everything arrives intact and in order") {
  PatternSink sink(21);
  const double t0 = 0.3, t1 = 0.8;
  OneLink link(sink.endpoint(), props(5, 50), {fault(FaultKind::partition, t0, t1)});
  const double start = now_s();
  const auto r = bulk_transfer(link.via(), sink, bytes_for(50, 0.9), 1, 21, 20);
  CHECK(r.intact);
  // The longest silence at the receiver is the partition (the link is otherwise never idle),
  // and nothing arrives strictly inside it (allowing for the 5 ms delay and scheduling slack).
  double gap = 0, gap_from = 0;
  for (std::size_t i = 1; i < r.arrivals.size(); ++i) {
    const double g = r.arrivals[i].first - r.arrivals[i - 1].first;
    if (g > gap) gap = g, gap_from = r.arrivals[i - 1].first - start;
  }
  CAPTURE(gap);
  CAPTURE(gap_from);
  CHECK(gap >= (t1 - t0) - 0.03);
  CHECK(gap_from <= t0 + 0.03);
  int inside = 0;
  for (const auto& [t, n] : r.arrivals) inside += (t - start > t0 + 0.03 && t - start < t1 - 0.005);
  CHECK(inside == 0);
}

TEST_CASE("after a partition, a rate-limited link's backlog leaves at the link's rate") {
  // 20 ms, 50 Mbit/s (6.25 MB/s): the proxy holds a backlog of about rate x (delay + 50 ms) when
  // the partition begins. Were it released at once when the partition ends, the first 50 ms
  // would see that backlog plus 50 ms of rate (about 750 KB); paced, they see 50 ms of rate plus
  // the bucket's depth and a read (about 410 KB).
  PatternSink sink(29);
  const double t0 = 0.3, t1 = 0.7, window = 0.05;
  OneLink link(sink.endpoint(), props(20, 50), {fault(FaultKind::partition, t0, t1)});
  const double start = now_s();
  const auto r = bulk_transfer(link.via(), sink, bytes_for(50, 1.2), 1, 29, 20);
  CHECK(r.intact);
  // Bytes arriving in the first `window` after the partition ends. Delays at the sink or in the
  // proxy only push arrivals later, out of the window, never into it.
  uint64_t first = 0, after = 0;
  for (const auto& [t, n] : r.arrivals) {
    if (t - start < t1) continue;
    after += n;
    if (t - start < t1 + window) first += n;
  }
  const double rate = 50e6 / 8;
  const double burst = std::max(16.0 * 1024, rate * 0.005);
  CAPTURE(first);
  CHECK(after > 0);
  CHECK(static_cast<double>(first) <= rate * window + burst + 2 * 65536);
}

TEST_CASE("a zero-delay link forwards exactly, also across a partition") {
  PatternSink sink(23);
  // A partition long enough that both samples below fall inside it even on a loaded machine.
  const double t0 = 0.05, t1 = 1.05;
  OneLink link(sink.endpoint(), props(0), {fault(FaultKind::partition, t0, t1)});
  const double start = now_s();
  auto transfer = std::async(std::launch::async, [&] {
    return bulk_transfer(link.via(), sink, uint64_t{256} << 20, 2, 23, 30);
  });
  // The proxy's own count of delivered bytes must not move inside the partition. (Arrival
  // times at the sink are looser: bytes written just before t0 may wait in its socket buffer.)
  auto sample_at = [&](double t) {
    std::this_thread::sleep_until(std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(start + t))));
    return std::pair{now_s() - start, link.proxy.stats()[0].forward.bytes};
  };
  const auto [ta, bytes_a] = sample_at(t0 + 0.03);
  const auto [tb, bytes_b] = sample_at(t1 - 0.3);
  const auto r = transfer.get();
  CHECK(r.intact);
  CHECK(r.bytes == uint64_t{512} << 20);
  CAPTURE(ta);
  CAPTURE(tb);
  REQUIRE(tb < t1 - 0.005);  // both samples fell inside the partition
  CHECK(bytes_a == bytes_b);
  CHECK(r.arrivals.back().first - start > t1);  // the transfer really spanned it
}

TEST_CASE("no byte arrives while a link is partitioned") {
  auto echo = make_echo_server();
  const double t0 = 0.2, t1 = 0.6;
  OneLink link(echo->endpoint(), props(2), {fault(FaultKind::partition, t0, t1)});
  const double start = now_s();
  Fd fd = connect_tcp(link.via());
  std::this_thread::sleep_for(std::chrono::duration<double>(t0 + 0.05));
  char msg[16] = "ping during cut", back[16];
  send_all(fd.get(), msg, sizeof msg);
  REQUIRE(recv_all(fd.get(), back, sizeof back));
  const double arrived = now_s() - start;
  CAPTURE(arrived);
  CHECK(arrived >= t1);
  CHECK(arrived <= t1 + 0.1);
  CHECK(std::string(back, sizeof back) == std::string(msg, sizeof msg));
}

TEST_CASE("after a partition, every connection's backlog is delivered at the heal") {
  // Connections that send during a partition wait for the heal, all due at the same instant as
  // the heal itself; statistics timers before it reorder the proxy's timer queue. The proxy
  // must heal and deliver them all, whatever order equal-time timers come out in.
  auto echo = make_echo_server();
  const double t0 = 0.1, t1 = 0.45;
  ProxyOptions options;
  options.stats_interval_s = 0.05;
  options.log_stats = false;
  WanProxy proxy({link_to(echo->endpoint(), props(0), {fault(FaultKind::partition, t0, t1)})},
                 options);
  proxy.start();
  const double start = now_s();
  constexpr int kConnections = 6;
  std::vector<Fd> fds;
  for (int i = 0; i < kConnections; ++i) {
    fds.push_back(connect_tcp(proxy.listen_endpoint(0)));
    timeval tv{2, 0};  // a proxy that never delivers fails the checks below
    ::setsockopt(fds.back().get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  char msg[16] = "ping during cut", back[16];
  for (int i = 0; i < kConnections; ++i) {  // one at a time, between statistics reports
    std::this_thread::sleep_until(std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(start + t0 + 0.03 + 0.05 * i))));
    send_all(fds[i].get(), msg, sizeof msg);
  }
  int echoed = 0;
  double last = 0;
  for (auto& fd : fds) {
    bool got = false;
    try {
      got = recv_all(fd.get(), back, sizeof back);
    } catch (const SystemError&) {  // timed out
    }
    if (!got) continue;
    echoed += std::string(back, sizeof back) == std::string(msg, sizeof msg);
    last = now_s() - start;
  }
  CAPTURE(last);
  CHECK(echoed == kConnections);
  CHECK(last >= t1);
  CHECK(last <= t1 + 1.0);  // at the heal; the slack is for a loaded machine
}

TEST_CASE(
    "with faults_origin_unix_s, a netsim started late keeps the schedule: a partition under way "
    "lasts until its end, and one already over never happens") {
  auto echo = make_echo_server();
  // The schedule began 5 s ago: [1, 2) is over, [4, 5.4) has 0.4 s to go.
  ProxyOptions options;
  options.faults_origin_unix_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
      5.0;
  WanProxy proxy(
      {link_to(echo->endpoint(), props(2),
               {fault(FaultKind::partition, 1, 2), fault(FaultKind::partition, 4, 5.4)})},
      options);
  proxy.start();
  const double start = now_s();
  Fd fd = connect_tcp(proxy.listen_endpoint(0));
  char msg[16] = "ping during cut", back[16];
  send_all(fd.get(), msg, sizeof msg);
  REQUIRE(recv_all(fd.get(), back, sizeof back));
  const double arrived = now_s() - start;
  CAPTURE(arrived);
  CHECK(arrived >= 0.3);
  CHECK(arrived <= 0.4 + 0.15);
  // After the end of the schedule: delivered at once.
  const double again = now_s();
  send_all(fd.get(), msg, sizeof msg);
  REQUIRE(recv_all(fd.get(), back, sizeof back));
  CHECK(now_s() - again < 0.1);
}

TEST_CASE("a reset cuts open connections and later connections work") {
  PatternSink sink(31);
  auto echo = make_echo_server();
  WanProxy proxy({link_to(sink.endpoint(), props(2, 10), {fault(FaultKind::reset, 0.3)}),
                  link_to(echo->endpoint(), props(2), {fault(FaultKind::reset, 0.3)})},
                 ProxyOptions{});
  proxy.start();
  const auto r = bulk_transfer(proxy.listen_endpoint(0), sink, bytes_for(10, 1.0), 1, 31, 10);
  CAPTURE(r.bytes);
  CHECK_FALSE(r.intact);
  CHECK(r.bytes < bytes_for(10, 1.0));
  CHECK(r.bytes > 0);
  CHECK(median(measure_rtts_ms(proxy.listen_endpoint(1), 5)) < 10);
  CHECK(proxy.stats()[0].bytes_dropped > 0);
}

TEST_CASE("a blackholed link accepts connections but delivers nothing") {
  auto echo = make_echo_server();
  OneLink link(echo->endpoint(), props(1), {fault(FaultKind::blackhole, 0.0, 0.6)});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Fd fd = connect_tcp(link.via());
  timeval tv{0, 300'000};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char msg[8] = "hello", back[8];
  send_all(fd.get(), msg, sizeof msg);
  CHECK(::recv(fd.get(), back, sizeof back, 0) < 0);  // timed out: nothing came back
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  CHECK(median(measure_rtts_ms(link.via(), 3)) < 10);  // after the blackhole: normal again
}

TEST_CASE("a set fault changes the delay from its time on") {
  auto echo = make_echo_server();
  Fault f = fault(FaultKind::set, 0.4);
  f.delay_ms = 20;
  OneLink link(echo->endpoint(), props(5), {f});
  Fd fd = connect_tcp(link.via());
  const double before = median(measure_rtts_ms(link.via(), 5));
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  const double after = median(measure_rtts_ms(link.via(), 5));
  // Emulated delays are floors; a loaded machine (ctest -j2 on 2 cores) adds a few ms on top, so
  // the bounds are tight below and loose above, still far apart for 10 and 40 ms.
  CHECK(before >= 9.5);
  CHECK(before <= 16.0);
  CHECK(after >= 39.5);
  CHECK(after <= 48.0);
}

TEST_CASE("statistics count delivered bytes and are written as JSONL") {
  const auto path = std::filesystem::temp_directory_path() /
                    ("netsim-stats-" + std::to_string(::getpid()) + ".jsonl");
  std::filesystem::remove(path);
  PatternSink sink(41);
  {
    ProxyOptions opts;
    opts.stats_jsonl = path;
    opts.stats_interval_s = 0.1;
    opts.log_stats = false;
    WanProxy proxy({link_to(sink.endpoint(), props(1, 20))}, opts);
    proxy.start();
    const auto r = bulk_transfer(proxy.listen_endpoint(0), sink, 500'000, 1, 41, 10);
    REQUIRE(r.intact);
    const auto s = proxy.stats()[0];
    CHECK(s.name == "a->b");
    CHECK(s.forward.bytes == 500'000);
    CHECK(s.connections_total == 1);
    CHECK(s.forward.chunks > 0);
    CHECK(s.forward.queue_ns_max > 0);  // 500 KB at 20 Mbit/s must queue behind the bucket
  }
  std::ifstream in(path);
  std::string line, last;
  int lines = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    CHECK(j["link"] == "a->b");
    last = line;
    ++lines;
  }
  CHECK(lines >= 2);
  CHECK(nlohmann::json::parse(last)["forward"]["bytes"] == 500'000);
  std::filesystem::remove(path);
}

}  // namespace geotrain::netsim::test
