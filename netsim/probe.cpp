#include "netsim/probe.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/splitmix64.hpp"

namespace geotrain::netsim {

void fill_pattern(uint64_t seed, uint64_t offset, std::span<char> out) {
  std::size_t i = 0;
  while (i < out.size()) {
    const uint64_t pos = offset + i;
    uint64_t state = seed ^ (pos >> 3) * 0x100000001b3ULL;  // one splitmix64 step per word
    const uint64_t word = splitmix64(state);
    const std::size_t in_word = pos & 7;
    const std::size_t n = std::min<std::size_t>(8 - in_word, out.size() - i);
    std::memcpy(out.data() + i, reinterpret_cast<const char*>(&word) + in_word, n);
    i += n;
  }
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

LoopbackServer::LoopbackServer(std::function<void(int)> serve) : serve_(std::move(serve)) {
  listener_ = listen_tcp({"127.0.0.1", 0}, /*nonblocking=*/false);
  port_ = local_port(listener_.get());
  acceptor_ = std::thread([this] {
    for (;;) {
      const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // listener shut down
      }
      set_nodelay(fd);
      std::lock_guard lock(mutex_);
      conns_.emplace_back(fd);
      threads_.emplace_back([this, fd] { serve_(fd); });
    }
  });
}

LoopbackServer::~LoopbackServer() {
  ::shutdown(listener_.get(), SHUT_RDWR);  // wakes accept()
  acceptor_.join();
  std::lock_guard lock(mutex_);
  for (auto& c : conns_) ::shutdown(c.get(), SHUT_RDWR);  // wakes blocked recv()
  for (auto& t : threads_) t.join();
}

std::unique_ptr<LoopbackServer> make_echo_server() {
  return std::make_unique<LoopbackServer>([](int fd) {
    std::vector<char> buf(256 << 10);
    for (;;) {
      const ssize_t r = ::recv(fd, buf.data(), buf.size(), 0);
      if (r <= 0) return;
      if (::send(fd, buf.data(), static_cast<std::size_t>(r), MSG_NOSIGNAL) != r) return;
    }
  });
}

PatternSink::PatternSink(uint64_t seed, bool verify) : seed_(seed), verify_(verify) {
  server_ = std::make_unique<LoopbackServer>([this](int fd) {
    FlowResult flow;
    std::vector<char> buf(256 << 10), expect(256 << 10);
    for (;;) {
      const ssize_t r = ::recv(fd, buf.data(), buf.size(), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) flow.intact = false;  // reset: the stream is incomplete
      if (r <= 0) break;
      const auto n = static_cast<std::size_t>(r);
      if (verify_ && flow.intact) {
        fill_pattern(seed_, flow.bytes, std::span(expect.data(), n));
        flow.intact = std::memcmp(buf.data(), expect.data(), n) == 0;
      }
      flow.bytes += n;
      flow.timeline.emplace_back(now_s(), flow.bytes);
    }
    ::shutdown(fd, SHUT_WR);  // tells the sender everything arrived
    std::lock_guard lock(mutex_);
    results_.push_back(std::move(flow));
    done_.notify_all();
  });
}

std::vector<FlowResult> PatternSink::wait(std::size_t n, double timeout_s) {
  std::unique_lock lock(mutex_);
  done_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                 [&] { return results_.size() >= n; });
  auto out = std::move(results_);
  results_.clear();
  return out;
}

std::vector<double> measure_rtts_ms(const Endpoint& via, int count, std::size_t bytes) {
  Fd fd = connect_tcp(via);
  std::vector<char> msg(bytes, 'x'), back(bytes);
  std::vector<double> out;
  for (int i = 0; i < count; ++i) {
    const double t0 = now_s();
    send_all(fd.get(), msg.data(), msg.size());
    GT_REQUIRE(recv_all(fd.get(), back.data(), back.size()), "echo through {} closed early",
               to_string(via));
    out.push_back((now_s() - t0) * 1e3);
  }
  return out;
}

BulkResult bulk_transfer(const Endpoint& via, PatternSink& sink, uint64_t bytes, int flows,
                         uint64_t seed, double timeout_s) {
  std::vector<std::thread> senders;
  for (int f = 0; f < flows; ++f) {
    senders.emplace_back([&via, bytes, seed, pattern = sink.verifies()] {
      try {
        Fd fd = connect_tcp(via);
        std::vector<char> buf(256 << 10);
        for (uint64_t sent = 0; sent < bytes;) {
          const auto n = static_cast<std::size_t>(std::min<uint64_t>(buf.size(), bytes - sent));
          if (pattern) fill_pattern(seed, sent, std::span(buf.data(), n));
          send_all(fd.get(), buf.data(), n);
          sent += n;
        }
        ::shutdown(fd.get(), SHUT_WR);
        char c;
        while (::recv(fd.get(), &c, 1, 0) > 0) {
        }  // the sink's EOF: all delivered
      } catch (const std::exception&) {
        // A cut connection shows up at the sink as an incomplete flow.
      }
    });
  }
  auto results = sink.wait(static_cast<std::size_t>(flows), timeout_s);
  for (auto& t : senders) t.join();
  BulkResult r;
  r.intact = results.size() == static_cast<std::size_t>(flows);
  std::vector<std::pair<double, uint64_t>> events;  // (time, bytes in this recv)
  for (const auto& f : results) {
    r.bytes += f.bytes;
    r.intact = r.intact && f.intact && f.bytes == bytes;
    uint64_t prev = 0;
    for (auto [t, total] : f.timeline) {
      events.emplace_back(t, total - prev);
      prev = total;
    }
  }
  if (events.size() < 2) return r;
  std::sort(events.begin(), events.end());
  r.seconds = events.back().first - events.front().first;
  // Steady state: from the arrival that completes the first 10% of bytes to the one that
  // completes 90%; skips the initial burst and the tail where flows finish one by one.
  const uint64_t lo = r.bytes / 10, hi = r.bytes - r.bytes / 10;
  uint64_t seen = 0, at_lo = 0;
  double t_lo = -1;
  for (const auto& [t, n] : events) {
    seen += n;
    if (t_lo < 0 && seen >= lo) t_lo = t, at_lo = seen;
    if (t_lo >= 0 && seen >= hi) {
      if (t > t_lo) r.steady_mbps = static_cast<double>(seen - at_lo) * 8 / 1e6 / (t - t_lo);
      break;
    }
  }
  r.arrivals = std::move(events);
  return r;
}

double rate_over_periods_mbps(const std::vector<std::pair<double, uint64_t>>& arrivals,
                              double period_s) {
  uint64_t total = 0;
  for (const auto& a : arrivals) total += a.second;
  uint64_t seen = 0;
  std::size_t i = 0;
  while (i < arrivals.size() && (seen += arrivals[i].second) < total / 10) ++i;
  if (i >= arrivals.size()) return 0;
  const double t0 = arrivals[i].first;
  const double periods = std::floor((arrivals.back().first - t0) / period_s);
  if (periods < 1) return 0;
  const double t1 = t0 + periods * period_s;
  uint64_t bytes = 0;  // arrived in (t0, t1]
  for (std::size_t j = i + 1; j < arrivals.size() && arrivals[j].first <= t1; ++j)
    bytes += arrivals[j].second;
  return static_cast<double>(bytes) * 8 / 1e6 / (t1 - t0);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace geotrain::netsim
