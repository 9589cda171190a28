#include "worker/leader/server_links.hpp"

#include <spdlog/spdlog.h>

#include <string>

#include "core/error.hpp"

namespace geotrain::worker {

ServerLinks::ServerLinks(const SyncConfig& config, wire::Context& context)
    : config_(config), context_(context) {
  GT_REQUIRE(!config_.servers.empty(), "region {}: no servers to synchronise with", config_.region);
  for (const auto& s : config_.servers) links_.emplace_back(s.region);
  if (config_.streams_per_server > 0)
    for (size_t s = 0; s < links_.size(); ++s) connect(s, config_.streams_per_server);
  if (config_.streams_per_server != 1 || config_.socket_buffer_bytes > 0) {
    const auto b = wire::effective_socket_buffer(config_.socket_buffer_bytes);
    spdlog::info("region {}: {} connection(s) per server; socket buffers {}", config_.region,
                 config_.streams_per_server > 0 ? std::to_string(config_.streams_per_server)
                                                : std::string("auto"),
                 config_.socket_buffer_bytes > 0
                     ? fmt::format("{} KiB asked, the kernel grants {} / {} KiB (send / receive; "
                                   "net.core.wmem_max {}, rmem_max {})",
                                   config_.socket_buffer_bytes / 1024, b.send_bytes / 1024,
                                   b.receive_bytes / 1024, b.send_max, b.receive_max)
                     : std::string("the OS default"));
  }
}

void ServerLinks::open() {
  for (size_t s = 0; s < links_.size(); ++s) {
    if (links_[s].open()) continue;
    const auto& server = config_.servers[s];
    ReplyWait probe_wait;
    probe_wait.stop = stop_;
    const uint32_t streams =
        choose_streams(context_, server, config_.region, config_.link_mbps,
                       config_.socket_buffer_bytes, config_.timeout, probe_wait);
    connect(s, streams);
  }
}

void ServerLinks::connect(size_t s, uint32_t streams) {
  const auto& server = config_.servers[s];
  links_[s].attach(open_server_client(context_, server, streams, config_.socket_buffer_bytes));
  if (!server.standby) return;
  ServerAddress standby = server;
  standby.endpoint = *server.standby;
  links_[s].attach_standby(
      open_server_client(context_, standby, streams, config_.socket_buffer_bytes),
      config_.takeover_after);
}

ReplyWait ServerLinks::waiting(size_t s, bool probe) {
  ReplyWait w;
  w.stop = stop_;
  if (probe) {
    w.probe = config_.heartbeat;
    w.on_probe = [this, s] { heartbeat_others(s); };
  }
  return w;
}

void ServerLinks::heartbeat_others(size_t busy) {
  // Fire and forget: the reply is skipped by the next collect() on that server (an id it does
  // not wait for); a server that lost us says so at our next request there.
  for (size_t o = 0; o < links_.size(); ++o)
    if (o != busy) links_[o].heartbeat_if_quiet(config_.heartbeat);
}

std::optional<wire::HelloReply> ServerLinks::rejoin(
    size_t s, const wire::Hello& hello, std::optional<std::chrono::milliseconds> within) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto others = [this, s] { heartbeat_others(s); };
  std::optional<wire::HelloReply> reply;
  if (within)
    reply = links_[s].try_rejoin(hello, *within, config_.heartbeat, others, stop_);
  else
    reply = links_[s].rejoin(hello, config_.timeout, config_.heartbeat, others, stop_);
  if (!reply) return reply;
  ++rejoins_;
  spdlog::warn("region {}: rejoined the server of region {} after {:.2f} s", config_.region,
               links_[s].region(), seconds_since(t0));
  return reply;
}

wire::HelloReply ServerLinks::hello_either(size_t s, const wire::Hello& hello,
                                           std::chrono::milliseconds timeout) {
  return links_[s].rejoin(
      hello, timeout, config_.heartbeat, [this, s] { heartbeat_others(s); }, stop_);
}

void ServerLinks::probe_if_quiet(size_t s) {
  auto& link = links_[s];
  if (!link.quiet_for(config_.heartbeat) || link.has_in_flight()) return;
  auto id = link.try_send(wire::Heartbeat{});
  if (!id) return;  // queue full: the server is behind, and will hear from us soon anyway
  link.collect({*id}, config_.timeout, "heartbeat", waiting(s, true));
}

void ServerLinks::goodbye(std::chrono::milliseconds wait) {
  std::vector<std::optional<uint64_t>> ids(links_.size());
  for (size_t s = 0; s < links_.size(); ++s)
    if (!links_[s].lost() && links_[s].open())  // not open: connect() never reached it
      ids[s] = links_[s].try_send(wire::Goodbye{});
  for (size_t s = 0; s < links_.size(); ++s) {
    if (!ids[s]) continue;
    try {
      links_[s].collect({*ids[s]}, wait, "goodbye", waiting(s, false));
    } catch (const std::exception& e) {
      spdlog::info("region {}: goodbye to the server of region {} not answered: {}", config_.region,
                   links_[s].region(), e.what());
    }
  }
}

}  // namespace geotrain::worker
