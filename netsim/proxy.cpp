// WanProxy: construction, the event loop, listeners, the fault schedule and statistics.
// Moving bytes through a connection lives in pipe.cpp.
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "netsim/proxy_impl.hpp"

namespace geotrain::netsim {

namespace {
constexpr uint64_t kListenerBit = uint64_t{1} << 63;
constexpr uint64_t kWakeToken = ~uint64_t{0};

}  // namespace

WanProxy::Impl::Impl(std::vector<LinkConfig> configs, ProxyOptions opts)
    : options(std::move(opts)), scratch(kReadMax) {
  epoll = Fd(GT_SYS_CHECK(::epoll_create1(EPOLL_CLOEXEC)));
  wake = Fd(GT_SYS_CHECK(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeToken;
  GT_SYS_CHECK(::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &ev));
  const auto now = Clock::now();
  for (std::size_t i = 0; i < configs.size(); ++i) {
    validate(configs[i]);
    auto link = std::make_unique<Link>();
    link->config = std::move(configs[i]);
    link->listener = listen_tcp(link->config.listen, /*nonblocking=*/true);
    link->port = local_port(link->listener.get());
    if (!link->config.capture_file.empty()) {
      link->capture.open(link->config.capture_file, std::ios::binary | std::ios::app);
      GT_REQUIRE(link->capture.good(), "link {}: capture_file '{}' cannot be written",
                 link->config.name(), link->config.capture_file.string());
    }
    for (int lane = 0; lane < 2; ++lane) {
      link->lanes[lane].rng.seed(options.seed * 1000003 + i * 2 + lane);
      const auto& p = link->config.properties;
      if (p.bandwidth_mbps > 0)
        link->lanes[lane].bucket.emplace(bytes_per_s(p), effective_burst_bytes(p), now);
    }
    ev.events = EPOLLIN;
    ev.data.u64 = kListenerBit | i;
    GT_SYS_CHECK(::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, link->listener.get(), &ev));
    for (const Fault& f : link->config.faults) {
      auto add = [&](double at, FaultAction a) { fault_events.push_back({at, i, a, f}); };
      switch (f.kind) {
        case FaultKind::partition:
          add(f.at_s, FaultAction::partition_on);
          add(*f.until_s, FaultAction::partition_off);
          break;
        case FaultKind::reset:
          add(f.at_s, FaultAction::reset);
          break;
        case FaultKind::set:
          add(f.at_s, FaultAction::set);
          break;
        case FaultKind::blackhole:
          add(f.at_s, FaultAction::blackhole_on);
          if (f.until_s) add(*f.until_s, FaultAction::blackhole_off);
          break;
      }
    }
    links.push_back(std::move(link));
  }
  // Same time: ends before starts, so back-to-back windows behave.
  std::stable_sort(fault_events.begin(), fault_events.end(),
                   [](const FaultEvent& a, const FaultEvent& b) { return a.at_s < b.at_s; });
  if (options.stats_jsonl) {
    stats_out.open(*options.stats_jsonl, std::ios::app);
    GT_REQUIRE(stats_out.good(), "stats jsonl file '{}' cannot be opened for appending",
               options.stats_jsonl->string());
  }
}

WanProxy::Impl::~Impl() = default;

void WanProxy::Impl::stop_loop() {
  stopping = true;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t rc = ::write(wake.get(), &one, sizeof one);
}

void WanProxy::Impl::run() {
  // Timers fire when due, not up to 50 us later (the default slack): delays stay exact.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  started = Clock::now();
  faults_origin = started;
  if (options.faults_origin_unix_s) {
    const auto since_origin = std::chrono::system_clock::now().time_since_epoch() -
                              std::chrono::duration<double>(*options.faults_origin_unix_s);
    faults_origin = started - std::chrono::duration_cast<Clock::duration>(since_origin);
  }
  last_report_at = started;
  last_report = snapshot();
  for (auto& link : links)  // token buckets start full at start()
    for (auto& lane : link->lanes)
      if (lane.bucket)
        lane.bucket.emplace(lane.bucket->rate(), effective_burst_bytes(link->config.properties),
                            started);
  for (std::size_t i = 0; i < fault_events.size(); ++i) {
    schedule({faults_origin + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(fault_events[i].at_s)),
              Timer::Kind::fault, 0, 0, i});
  }
  if (options.stats_interval_s > 0) {
    schedule({started + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(options.stats_interval_s)),
              Timer::Kind::stats});
  }
  std::array<epoll_event, 256> events;
  while (!stopping.load(std::memory_order_relaxed)) {
    timespec timeout{};
    timespec* tp = nullptr;
    if (!timers.empty()) {
      const auto wait = std::max(Clock::duration::zero(), timers.top().at - Clock::now());
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
      timeout.tv_sec = ns / 1000000000;
      timeout.tv_nsec = ns % 1000000000;
      tp = &timeout;
    }
    const int n =
        ::epoll_pwait2(epoll.get(), events.data(), static_cast<int>(events.size()), tp, nullptr);
    if (n < 0 && errno == EINTR) continue;
    GT_SYS_CHECK(n);
    for (int i = 0; i < n; ++i) {
      const uint64_t token = events[i].data.u64;
      if (token == kWakeToken) continue;
      if (token & kListenerBit) {
        on_accept(static_cast<std::size_t>(token & ~kListenerBit));
        continue;
      }
      auto it = connections.find(token >> 1);
      if (it == connections.end()) continue;  // closed by an earlier event of this batch
      on_socket_event(*it->second, static_cast<int>(token & 1), events[i].events);
    }
    const auto now = Clock::now();
    while (!timers.empty() && timers.top().at <= now && !stopping.load(std::memory_order_relaxed)) {
      const Timer t = timers.top();
      timers.pop();
      switch (t.kind) {
        case Timer::Kind::pipe: {
          auto it = connections.find(t.conn);
          if (it == connections.end()) break;
          Connection& c = *it->second;
          Pipe& pipe = c.pipes[t.pipe];
          if (pipe.armed && *pipe.armed == t.at) pipe.armed.reset();
          deliver(c, t.pipe);
          if (connections.count(t.conn)) {
            update_interest(c);
            maybe_finish(c);
          }
          break;
        }
        case Timer::Kind::fault:
          on_fault(t.index);
          break;
        case Timer::Kind::stats:
          on_stats();
          schedule({t.at + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(options.stats_interval_s)),
                    Timer::Kind::stats});
          break;
      }
    }
  }
  if (options.stats_interval_s > 0) on_stats();  // final record
  while (!connections.empty()) close_connection(*connections.begin()->second, /*abort=*/true);
}

void WanProxy::Impl::on_accept(std::size_t link_index) {
  Link& link = *links[link_index];
  for (int i = 0; i < 64; ++i) {
    const int fd = ::accept4(link.listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
        return;
      spdlog::warn("netsim {}: accept failed: {}", link.config.name(), std::strerror(errno));
      return;
    }
    auto c = std::make_unique<Connection>();
    c->id = next_id++;
    c->link = &link;
    c->client = Fd(fd);
    set_nodelay(fd);
    if (link.blackhole) {
      c->blackholed = true;
      c->connecting = false;
    } else {
      try {
        c->upstream = connect_tcp_nonblocking(link.config.target);
        set_nodelay(c->upstream.get());
      } catch (const SystemError& e) {
        spdlog::warn("netsim {}: cannot connect to {}: {}", link.config.name(),
                     to_string(link.config.target), e.what());
        set_linger_zero(fd);
        continue;  // the client's Fd closes here
      }
    }
    link.connections.insert(c->id);
    link.open.fetch_add(1, std::memory_order_relaxed);
    link.total.fetch_add(1, std::memory_order_relaxed);
    Connection& ref = *c;
    connections.emplace(c->id, std::move(c));
    update_interest(ref);
  }
}

void WanProxy::Impl::on_fault(std::size_t index) {
  const FaultEvent& e = fault_events[index];
  Link& link = *links[e.link];
  const auto now = Clock::now();
  spdlog::info("netsim {}: fault at {:.3f} s: {}", link.config.name(), e.at_s, [&] {
    switch (e.action) {
      case FaultAction::partition_on:
        return "partition begins";
      case FaultAction::partition_off:
        return "partition ends";
      case FaultAction::reset:
        return "reset connections";
      case FaultAction::set:
        return "set properties";
      case FaultAction::blackhole_on:
        return "blackhole begins";
      case FaultAction::blackhole_off:
        return "blackhole ends";
    }
    return "?";
  }());
  std::vector<uint64_t> ids(link.connections.begin(), link.connections.end());
  auto for_each_conn = [&](auto&& f) {
    for (uint64_t id : ids) {
      auto it = connections.find(id);
      if (it != connections.end()) f(*it->second);
    }
  };
  switch (e.action) {
    case FaultAction::partition_on: {
      link.partitioned = true;
      const TimePoint partition_end =
          faults_origin + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(*e.fault.until_s));
      // The link pauses: what is on its way resumes where it was once the partition ends, and
      // the backlog leaves at the link's rate (a burst at the end would overrun the rate).
      const auto pause = partition_end - now;
      if (pause <= Clock::duration::zero()) break;
      for (auto& lane : link.lanes)
        if (lane.bucket) lane.bucket->pause(now, partition_end);
      for_each_conn([&](Connection& c) {
        for (Pipe& pipe : c.pipes) {
          for (Chunk& chunk : pipe.queue)
            if (chunk.deliver_at > now) chunk.deliver_at += pause;
          if (pipe.last_delivery > now) pipe.last_delivery += pause;
        }
      });
      break;
    }
    case FaultAction::partition_off:
      link.partitioned = false;
      for_each_conn([&](Connection& c) {
        for (int p = 0; p < 2 && connections.count(c.id); ++p) deliver(c, p);
        if (connections.count(c.id)) {
          update_interest(c);
          maybe_finish(c);
        }
      });
      break;
    case FaultAction::reset:
      for_each_conn([&](Connection& c) { close_connection(c, /*abort=*/true); });
      break;
    case FaultAction::set: {
      auto& p = link.config.properties;
      if (e.fault.delay_ms) p.delay_ms = *e.fault.delay_ms;
      if (e.fault.jitter_ms) p.jitter_ms = *e.fault.jitter_ms;
      if (e.fault.window_kib) p.window_kib = *e.fault.window_kib;
      if (e.fault.bandwidth_mbps) {
        p.bandwidth_mbps = *e.fault.bandwidth_mbps;
        for (auto& lane : link.lanes) {
          if (p.bandwidth_mbps == 0) {
            lane.bucket.reset();
          } else if (lane.bucket) {
            lane.bucket->set_rate(bytes_per_s(p), effective_burst_bytes(p), now);
          } else {
            lane.bucket.emplace(bytes_per_s(p), effective_burst_bytes(p), now);
          }
        }
      }
      for_each_conn([&](Connection& c) { update_interest(c); });
      break;
    }
    case FaultAction::blackhole_on:
      link.blackhole = true;
      for_each_conn([&](Connection& c) { blackhole_connection(c); });
      break;
    case FaultAction::blackhole_off:
      link.blackhole = false;
      for_each_conn([&](Connection& c) {
        if (c.blackholed) close_connection(c, /*abort=*/true);
      });
      break;
  }
}

std::vector<LinkStats> WanProxy::Impl::snapshot() const {
  std::vector<LinkStats> out;
  out.reserve(links.size());
  for (const auto& l : links) {
    LinkStats s;
    s.name = l->config.name();
    s.connections_open = l->open.load(std::memory_order_relaxed);
    s.connections_total = l->total.load(std::memory_order_relaxed);
    s.bytes_dropped = l->dropped.load(std::memory_order_relaxed);
    for (int lane = 0; lane < 2; ++lane) {
      const auto& c = l->lanes[lane].counters;
      LaneStats& ls = lane == 0 ? s.forward : s.reverse;
      ls.bytes = c.bytes.load(std::memory_order_relaxed);
      ls.chunks = c.chunks.load(std::memory_order_relaxed);
      ls.queue_ns_sum = c.queue_ns_sum.load(std::memory_order_relaxed);
      ls.queue_ns_max = c.queue_ns_max.load(std::memory_order_relaxed);
    }
    out.push_back(std::move(s));
  }
  return out;
}

void WanProxy::Impl::on_stats() {
  const auto now = Clock::now();
  const double t_s = std::chrono::duration<double>(now - started).count();
  const double dt_s = std::chrono::duration<double>(now - last_report_at).count();
  auto current = snapshot();
  for (std::size_t i = 0; i < current.size(); ++i) {
    const auto record = interval_record(last_report[i], current[i], t_s, dt_s);
    if (stats_out.is_open()) stats_out << record.dump() << '\n';
    if (options.log_stats) {
      spdlog::info("netsim {}: {} open, fwd {:.2f} Mbit/s (queue {:.2f} ms), rev {:.2f} Mbit/s",
                   current[i].name, current[i].connections_open,
                   record["forward"]["mbps"].get<double>(),
                   record["forward"]["queue_ms_mean"].get<double>(),
                   record["reverse"]["mbps"].get<double>());
    }
  }
  if (stats_out.is_open()) stats_out.flush();
  last_report = std::move(current);
  last_report_at = now;
}

WanProxy::WanProxy(std::vector<LinkConfig> links, ProxyOptions options)
    : impl_(std::make_unique<Impl>(std::move(links), std::move(options))) {}

WanProxy::~WanProxy() { stop(); }

std::size_t WanProxy::link_count() const { return impl_->links.size(); }

uint16_t WanProxy::listen_port(std::size_t link) const {
  GT_ASSERT(link < impl_->links.size(), "link {} of {}", link, impl_->links.size());
  return impl_->links[link]->port;
}

Endpoint WanProxy::listen_endpoint(std::size_t link) const {
  return {impl_->links[link]->config.listen.host, listen_port(link)};
}

void WanProxy::start() {
  GT_ASSERT(!impl_->thread.joinable(), "WanProxy started twice");
  impl_->thread = std::thread([this] {
    try {
      impl_->run();
    } catch (const std::exception& e) {
      spdlog::critical("netsim event loop failed: {}", e.what());
      throw;  // terminate: a proxy that silently stops forwarding would corrupt experiments
    }
  });
}

void WanProxy::stop() {
  if (!impl_->thread.joinable()) return;
  impl_->stop_loop();
  impl_->thread.join();
}

std::vector<LinkStats> WanProxy::stats() const { return impl_->snapshot(); }

}  // namespace geotrain::netsim
