#include "worker/leader/server_hellos.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/error.hpp"
#include "worker/leader/reply_wait.hpp"

namespace geotrain::worker {

std::string FragmentLayout::describe() const {
  return fmt::format("{} fragment(s){}", fragments,
                     critical ? " plus the critical tensors' own" : "");
}

uint64_t ServerHellos::first_round() const {
  return next_round.empty() ? 1 : *std::min_element(next_round.begin(), next_round.end());
}

void ServerHellos::adopt_layout(SyncConfig& config) const {
  if (layout) {
    GT_REQUIRE(layout->fragments <= 1024,
               "server of region {}: its hello says {} fragments, at most 1024", layout->server,
               layout->fragments);
    const FragmentLayout ours{config.fragments, config.critical_fragment, ""};
    if (layout->fragments != ours.fragments || layout->critical != ours.critical) {
      spdlog::warn("region {}: the servers cut {}, this worker's config {}: following the servers",
                   config.region, layout->describe(), ours.describe());
      config.fragments = layout->fragments;
      config.critical_fragment = layout->critical;
    }
  }
  // The servers' map must have the fragments they said (or, from servers that do not say, this
  // region's own count): P, plus the critical one.
  uint32_t highest = 0;
  for (const auto& sh : shards) highest = std::max(highest, sh.fragment);
  GT_REQUIRE(
      highest + 1 == config.fragment_count(),
      "region {}: the servers' shards are in {} fragment(s), this worker expects {} "
      "(worker.fragments = {}{}; do the servers read the same config?)",
      config.region, highest + 1, config.fragment_count(), config.fragments,
      config.critical_fragment ? ", plus the critical one (worker.stream_critical: false)" : "");
}

ServerHellos greet(ServerLinks& links, const wire::Hello& hello, const ParamTable& layout,
                   Segments segments, std::chrono::milliseconds timeout) {
  ServerHellos out;
  // Every hello goes out before any reply is awaited: one round trip to the farthest server, not
  // one per server in turn (their handshakes run side by side as well).
  // A server with a standby (server.standby) is greeted on both connections, its answer taken
  // from whichever serves its shards (a leader may start while the standby does).
  std::vector<uint64_t> sent(links.size());
  for (size_t s = 0; s < links.size(); ++s)
    if (!links[s].has_standby()) sent[s] = links[s].send(hello);
  for (size_t s = 0; s < links.size(); ++s) {
    auto& link = links[s];
    wire::HelloReply reply;
    if (link.has_standby()) {
      reply = links.hello_either(s, hello, timeout);
    } else {
      auto replies = link.collect({sent[s]}, timeout, "hello", links.waiting(s, false));
      reply = body_as<wire::HelloReply>(replies.begin()->second, link.region());
    }
    const auto& caps = reply.capabilities;
    link.set_offers_flush(std::find(caps.begin(), caps.end(), "flush") != caps.end());
    out.next_round.push_back(reply.next_round);
    if (reply.fragments > 0) {
      const FragmentLayout said{reply.fragments, reply.critical_fragment, link.region()};
      const auto& before = out.layout;
      GT_REQUIRE(
          !before || (before->fragments == said.fragments && before->critical == said.critical),
          "region {}: the servers disagree on the streaming layout: the server of region {} "
          "cuts {}, the server of region {} cuts {} (do they read the same config?)",
          hello.region, before ? before->server : "", before ? before->describe() : "", said.server,
          said.describe());
      out.layout = said;
    }
    for (const auto& info : reply.shards)
      out.shards.emplace_back(info, s, layout, segments, link.region());
  }
  uint64_t covered = 0;
  for (const auto& sh : out.shards) {
    GT_REQUIRE(sh.id < out.shards.size(), "region {}: shard id {} out of range ({} shards)",
               hello.region, sh.id, out.shards.size());
    covered += sh.count;
  }
  GT_REQUIRE(covered == layout.total_elements(),
             "region {}: the servers' shards cover {} of {} parameters", hello.region, covered,
             layout.total_elements());
  return out;
}

}  // namespace geotrain::worker
