// WanProxy: moving the bytes of one connection, one pipe (direction) at a time. Each pipe reads
// from its source socket into time-stamped chunks and writes them to its destination once due.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "netsim/proxy_impl.hpp"

namespace geotrain::netsim {

namespace {

Clock::duration from_ms(double ms) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
}

// Bytes per read when a bandwidth limit is set: about 1 ms worth, so pacing stays smooth.
std::size_t segment_bytes(double rate_bytes_per_s) {
  return static_cast<std::size_t>(std::clamp(rate_bytes_per_s * 1e-3, 1448.0, 65536.0));
}

// One-way delay of the next chunk: delay + a jitter sample, never negative.
Clock::duration sample_delay(const LinkProperties& p, std::mt19937_64& rng) {
  double ms = p.delay_ms;
  if (p.jitter_ms > 0) {
    if (p.jitter_distribution == JitterDistribution::uniform) {
      ms += std::uniform_real_distribution<double>(-p.jitter_ms, p.jitter_ms)(rng);
    } else {
      ms += std::clamp(std::normal_distribution<double>(0, p.jitter_ms)(rng), -3 * p.jitter_ms,
                       3 * p.jitter_ms);
    }
  }
  return from_ms(std::max(0.0, ms));
}

bool would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

}  // namespace

std::size_t WanProxy::Impl::read_room(const Connection& c, int p) const {
  const Pipe& pipe = c.pipes[p];
  if (pipe.src_eof || (p == 1 && c.connecting)) return 0;
  if (c.blackholed) return kReadMax;
  if (pipe.spliced > 0) return 0;  // bytes wait in the splice pipe: they go first
  const auto& props = c.link->config.properties;
  const Lane& lane = c.link->lanes[p];
  std::size_t room = kReadMax;
  // Bytes this pipe may hold unwritten: what the path itself holds (rate x delay) plus a
  // router-like queue; without a rate limit a fixed cap keeps memory bounded.
  std::size_t cap;
  if (lane.bucket) {
    const double rate = lane.bucket->rate();
    room = std::min(room, segment_bytes(rate));
    cap = static_cast<std::size_t>(rate * (props.delay_ms + 3 * props.jitter_ms + 50) / 1e3 +
                                   effective_burst_bytes(props)) +
          kReadMax;
  } else {
    cap = props.delay_ms == 0 && props.jitter_ms == 0 ? 2 * kReadMax : std::size_t{64} << 20;
  }
  room = std::min(room, pipe.pending < cap ? cap - pipe.pending : 0);
  if (props.window_kib > 0) {
    const auto window = static_cast<std::size_t>(props.window_kib * 1024);
    room = std::min(room, pipe.inflight < window ? window - pipe.inflight : 0);
  }
  return room;
}

void WanProxy::Impl::on_socket_event(Connection& c, int side, uint32_t events) {
  const uint64_t id = c.id;
  if (side == 1 && c.connecting) {
    if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
    if (const int err = take_socket_error(c.upstream.get()); err != 0) {
      spdlog::warn("netsim {}: connect to {} failed: {}", c.link->config.name(),
                   to_string(c.link->config.target), std::strerror(err));
      close_connection(c, /*abort=*/true);
      return;
    }
    c.connecting = false;
    deliver(c, 0);
  } else {
    if (events & EPOLLERR) {
      close_connection(c, /*abort=*/true);
      return;
    }
    // side 0 is the client: its reads feed pipe 0 and its writes drain pipe 1.
    const int reading = side == 0 ? 0 : 1;
    const int writing = 1 - reading;
    if (events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) on_readable(c, reading);
    if (!connections.count(id)) return;
    if (events & EPOLLOUT) {
      c.pipes[writing].blocked = false;
      deliver(c, writing);
    }
  }
  if (!connections.count(id)) return;
  update_interest(c);
  maybe_finish(c);
}

void WanProxy::Impl::on_readable(Connection& c, int p) {
  Pipe& pipe = c.pipes[p];
  Link& link = *c.link;
  Lane& lane = link.lanes[p];
  const auto& props = link.config.properties;
  for (int round = 0; round < 16; ++round) {
    const std::size_t room = read_room(c, p);
    if (room == 0) break;
    const bool fast = props.delay_ms == 0 && props.jitter_ms == 0 && !lane.bucket &&
                      props.window_kib == 0 && pipe.queue.empty() && !link.partitioned &&
                      !(p == 0 && c.connecting) && !c.blackholed && !link.capture.is_open();
    if (fast) {                     // forward at once, through a kernel pipe
      if (pipe.spliced > 0) break;  // the destination is full; EPOLLOUT drains the pipe first
      if (!pipe.splice_w.valid()) {
        int fds[2];
        GT_SYS_CHECK(::pipe2(fds, O_NONBLOCK | O_CLOEXEC));
        pipe.splice_r = Fd(fds[0]);
        pipe.splice_w = Fd(fds[1]);
        ::fcntl(fds[1], F_SETPIPE_SZ, static_cast<int>(kReadMax));  // best effort: fewer calls
      }
      const ssize_t r = ::splice(c.src(p), nullptr, pipe.splice_w.get(), nullptr, room,
                                 SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (r < 0) {
        if (would_block(errno)) break;
        close_connection(c, /*abort=*/true);
        return;
      }
      if (r > 0) {
        pipe.spliced += static_cast<std::size_t>(r);
        pipe.pending += static_cast<std::size_t>(r);
        if (!flush_spliced(c, p)) return;
        if (pipe.spliced > 0) return;  // blocked: update_interest asks for EPOLLOUT
        continue;
      }
      // r == 0: end of stream, handled below like any other.
    }
    ssize_t r = 0;
    if (!fast) {
      r = ::recv(c.src(p), scratch.data(), room, 0);
      if (r < 0) {
        if (would_block(errno)) break;
        close_connection(c, /*abort=*/true);
        return;
      }
    }
    const auto now = Clock::now();
    if (c.blackholed) {
      link.dropped.fetch_add(static_cast<uint64_t>(r), std::memory_order_relaxed);
      if (r == 0) pipe.src_eof = true;
      continue;
    }
    const auto n = static_cast<std::size_t>(r);
    if (n > 0 && link.capture.is_open()) {
      link.capture.write(scratch.data(), static_cast<std::streamsize>(n));
      link.capture.flush();  // readable by a test while the link runs
    }
    if (n == 0) {
      pipe.src_eof = true;
      Chunk fin;
      fin.eof = true;
      fin.deliver_at = std::max(pipe.last_delivery, now + sample_delay(props, lane.rng));
      pipe.last_delivery = fin.deliver_at;
      pipe.queue.push_back(std::move(fin));
      deliver(c, p);
      return;
    }
    const TimePoint released = lane.bucket ? lane.bucket->reserve(n, now) : now;
    Chunk chunk;
    chunk.data.assign(scratch.data(), scratch.data() + n);
    chunk.deliver_at = std::max(pipe.last_delivery, released + sample_delay(props, lane.rng));
    pipe.last_delivery = chunk.deliver_at;
    pipe.pending += n;
    if (props.window_kib > 0) pipe.inflight += n;
    const auto queued = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(released - now).count());
    lane.counters.chunks.fetch_add(1, std::memory_order_relaxed);
    lane.counters.queue_ns_sum.fetch_add(queued, std::memory_order_relaxed);
    if (queued > lane.counters.queue_ns_max.load(std::memory_order_relaxed))
      lane.counters.queue_ns_max.store(queued, std::memory_order_relaxed);
    pipe.queue.push_back(std::move(chunk));
  }
  deliver(c, p);
}

void WanProxy::Impl::deliver(Connection& c, int p) {
  Pipe& pipe = c.pipes[p];
  Link& link = *c.link;
  const auto now = Clock::now();
  // Acknowledgements first: they only open the window.
  while (!pipe.acks.empty() && pipe.acks.front().first <= now) {
    pipe.inflight -= pipe.acks.front().second;
    pipe.acks.pop_front();
  }
  const bool can_write = !(p == 0 && c.connecting) && !link.partitioned && !pipe.blocked;
  if (can_write && pipe.spliced > 0 && !flush_spliced(c, p)) return;
  while (can_write && !pipe.blocked && !pipe.queue.empty() &&
         pipe.queue.front().deliver_at <= now) {
    Chunk& ch = pipe.queue.front();
    if (ch.eof) {
      ::shutdown(c.dst(p), SHUT_WR);
      pipe.eof_sent = true;
      pipe.queue.pop_front();
      continue;
    }
    const ssize_t w = ::send(c.dst(p), ch.data.data() + ch.offset, ch.data.size() - ch.offset,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (would_block(errno)) {
        pipe.blocked = true;
        break;
      }
      close_connection(c, /*abort=*/true);
      return;
    }
    const auto n = static_cast<std::size_t>(w);
    ch.offset += n;
    pipe.pending -= n;
    link.lanes[p].counters.bytes.fetch_add(n, std::memory_order_relaxed);
    if (link.config.properties.window_kib > 0 || pipe.inflight > 0) {
      pipe.acks.emplace_back(now + from_ms(link.config.properties.delay_ms), n);
    }
    if (ch.offset < ch.data.size()) {
      pipe.blocked = true;
      break;
    }
    pipe.queue.pop_front();
  }
  arm_pipe(c, p);
}

bool WanProxy::Impl::flush_spliced(Connection& c, int p) {
  Pipe& pipe = c.pipes[p];
  while (pipe.spliced > 0) {
    const ssize_t w = ::splice(pipe.splice_r.get(), nullptr, c.dst(p), nullptr, pipe.spliced,
                               SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (w < 0) {
      if (would_block(errno)) {
        pipe.blocked = true;
        return true;
      }
      close_connection(c, /*abort=*/true);
      return false;
    }
    const auto n = static_cast<std::size_t>(w);
    pipe.spliced -= n;
    pipe.pending -= n;
    c.link->lanes[p].counters.bytes.fetch_add(n, std::memory_order_relaxed);
  }
  return true;
}

void WanProxy::Impl::arm_pipe(Connection& c, int p) {
  Pipe& pipe = c.pipes[p];
  std::optional<TimePoint> next;
  // A partitioned link's queues wait for the heal, which delivers every connection of the link
  // (on_fault) and arms what is due later. A timer at the heal's own time would fire before it
  // and re-arm for that time again, over and over.
  if (!pipe.queue.empty() && !pipe.blocked && !(p == 0 && c.connecting) && !c.link->partitioned)
    next = pipe.queue.front().deliver_at;
  if (!pipe.acks.empty())
    next = next ? std::min(*next, pipe.acks.front().first) : pipe.acks.front().first;
  if (!next || (pipe.armed && *pipe.armed <= *next)) return;
  pipe.armed = *next;
  schedule({*next, Timer::Kind::pipe, c.id, p, 0});
}

void WanProxy::Impl::update_interest(Connection& c) {
  for (int side = 0; side < 2; ++side) {
    const int fd = side == 0 ? c.client.get() : c.upstream.get();
    if (fd < 0) continue;
    uint32_t want = 0;
    if (side == 1 && c.connecting) {
      want = EPOLLOUT;
    } else {
      const int reading = side == 0 ? 0 : 1;
      if (read_room(c, reading) > 0) want |= EPOLLIN;
      if (c.pipes[1 - reading].blocked) want |= EPOLLOUT;
    }
    if (want == c.interest[side]) continue;
    epoll_event ev{};
    ev.events = want;
    ev.data.u64 = (c.id << 1) | static_cast<uint64_t>(side);
    // Nothing wanted: leave the set entirely, or EPOLLHUP would keep waking the loop.
    const int op = want == 0               ? EPOLL_CTL_DEL
                   : c.interest[side] == 0 ? EPOLL_CTL_ADD
                                           : EPOLL_CTL_MOD;
    GT_SYS_CHECK(::epoll_ctl(epoll.get(), op, fd, &ev));
    c.interest[side] = want;
  }
}

void WanProxy::Impl::maybe_finish(Connection& c) {
  if (c.pipes[0].eof_sent && c.pipes[1].eof_sent) close_connection(c, /*abort=*/false);
}

void WanProxy::Impl::blackhole_connection(Connection& c) {
  c.blackholed = true;
  for (Pipe& pipe : c.pipes) {
    c.link->dropped.fetch_add(pipe.pending, std::memory_order_relaxed);
    pipe.queue.clear();
    pipe.acks.clear();
    pipe.pending = pipe.inflight = pipe.spliced = 0;
    pipe.splice_r.reset();
    pipe.splice_w.reset();
    pipe.blocked = false;
  }
  update_interest(c);
}

void WanProxy::Impl::close_connection(Connection& c, bool abort) {
  const uint64_t id = c.id;
  Link& link = *c.link;
  if (abort) {
    for (const Pipe& pipe : c.pipes)
      link.dropped.fetch_add(pipe.pending, std::memory_order_relaxed);
    if (c.client.valid()) set_linger_zero(c.client.get());
    if (c.upstream.valid()) set_linger_zero(c.upstream.get());
  }
  link.connections.erase(id);
  link.open.fetch_sub(1, std::memory_order_relaxed);
  connections.erase(id);  // closes both sockets, which leaves the epoll set
}

}  // namespace geotrain::netsim
