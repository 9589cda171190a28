// RegionSync's answers to a server that is slow, stopped or restarted: deferred shards
// (worker.shard_wait_ms: their replies parked, merged late by take_ready() or settle()),
// rejoining a server that lost the region, heartbeats while another server keeps the leader
// waiting, and the goodbye at the end; and the uplink residuals a worker snapshot keeps and
// --resume restores. The exchange itself is in region_sync.cpp.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/error.hpp"
#include "worker/region_sync.hpp"
#include "worker/reply_wait.hpp"

namespace geotrain::worker {

using Clock = std::chrono::steady_clock;

std::vector<uint64_t> RegionSync::pending_ids(size_t s) const {
  std::vector<uint64_t> ids;
  for (const auto& sh : shards_) {
    if (sh.server != s) continue;
    if (sh.pending_push) ids.push_back(*sh.pending_push);
    if (sh.pending_pull) ids.push_back(*sh.pending_pull);
  }
  if (servers_[s].probe) ids.push_back(*servers_[s].probe);
  return ids;
}

ReplyWait RegionSync::waiting(size_t s, bool probe) {
  ReplyWait w;
  w.stop = stop_;
  if (probe) {
    w.probe = config_.heartbeat;
    w.on_probe = others_alive(s);
  }
  w.parked_ids = pending_ids(s);
  w.parked = &servers_[s].parked;
  return w;
}

void RegionSync::drop_deferred(size_t s) {
  // The shards stay `unstarted`: the rejoin pulls them in full, and the exchange that does it
  // merges them.
  for (auto& sh : shards_) {
    if (sh.server != s) continue;
    sh.pending_push.reset();
    sh.pending_pull.reset();
  }
  servers_[s].parked.clear();
  servers_[s].probe.reset();
}

size_t RegionSync::deferred_shards() const {
  return static_cast<size_t>(
      std::count_if(shards_.begin(), shards_.end(), [](const auto& sh) { return sh.unstarted; }));
}

void RegionSync::take_deferred(size_t s, std::chrono::milliseconds wait,
                               const std::vector<bool>& wanted, std::vector<bool>& merged) {
  auto& link = servers_[s];
  const auto deadline = Clock::now() + wait;
  uint64_t released = UINT64_MAX;  // a late shard's released round says nothing of this round
  for (;;) {
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < shards_.size(); ++i) {
      const auto& sh = shards_[i];
      if (sh.server != s || !wanted[i]) continue;
      if (sh.pending_push) ids.push_back(*sh.pending_push);
      if (sh.pending_pull) ids.push_back(*sh.pending_pull);
    }
    if (ids.empty()) return;
    // A server silent for a heartbeat period is asked whether it still knows this region (a
    // probe per heartbeat period; the newest one's answer is parked like the deferred replies).
    const auto now = Clock::now();
    if (now - link.last_contact >= config_.heartbeat &&
        (!link.probe || now - link.probe_sent >= config_.heartbeat)) {
      link.probe = link.client->send(wire::Heartbeat{});
      link.probe_sent = now;
    }
    if (link.probe) ids.push_back(*link.probe);
    const auto left =
        std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                 std::chrono::milliseconds(0));
    ReplyWait w = waiting(s, false);
    w.partial = true;
    auto replies = collect(*link.client, link.region, ids, std::min(left, config_.heartbeat),
                           "deferred push and pull", w);
    if (!replies.empty()) link.last_contact = Clock::now();
    if (link.probe && replies.erase(*link.probe)) link.probe.reset();
    bool progress = false;
    for (size_t i = 0; i < shards_.size(); ++i) {
      auto& sh = shards_[i];
      if (sh.server != s || !wanted[i]) continue;
      if (sh.pending_push) {
        if (auto it = replies.find(*sh.pending_push); it != replies.end()) {
          body_as<wire::PushReply>(it->second, link.region);  // an answer, not an error
          sh.pending_push.reset();
          progress = true;
          if (!sh.pending_pull) {  // its server holds more of our shards: the pull goes now
            const uint64_t floor = sh.pending_round > config_.staleness_bound
                                       ? sh.pending_round - config_.staleness_bound
                                       : 0;
            auto id = link.client->send(wire::PullRequest{sh.id, sh.version, false, floor});
            GT_REQUIRE(id.has_value(), "server of region {}: send queue full", link.region);
            sh.pending_pull = *id;
          }
        }
      }
      if (sh.pending_pull && !sh.pending_push) {
        if (auto it = replies.find(*sh.pending_pull); it != replies.end()) {
          apply_pull(i, it->second, nullptr, released);
          sh.pending_pull.reset();
          merged[i] = true;
          progress = true;
        }
      }
    }
    if (!progress && Clock::now() >= deadline) return;
  }
}

std::vector<ElementRange> RegionSync::take_ready(uint32_t fragment) {
  std::vector<bool> mine(shards_.size()), merged(shards_.size());
  for (size_t i = 0; i < shards_.size(); ++i)
    mine[i] = shards_[i].fragment == fragment && shards_[i].pending();
  for (size_t s = 0; s < servers_.size(); ++s) {
    if (servers_[s].lost) continue;
    try {
      take_deferred(s, std::chrono::milliseconds(0), mine, merged);
    } catch (const ServerLost& e) {
      lose(s, e.what());  // the next exchange rejoins it and pulls its shards in full
    }
  }
  std::vector<ElementRange> out;
  for (size_t i = 0; i < shards_.size(); ++i) {
    auto& sh = shards_[i];
    if (!merged[i]) continue;
    // The next exchange pushes it, in the round its server expects next.
    sh.round_shift =
        static_cast<int64_t>(rounds_[sh.fragment]) - static_cast<int64_t>(sh.pending_round + 1);
    sh.unstarted = false;
    out.push_back({sh.offset, sh.count});
  }
  return out;
}

std::vector<ElementRange> RegionSync::settle() {
  std::vector<ElementRange> out;
  std::vector<bool> all(shards_.size(), true), merged(shards_.size());
  uint64_t released = UINT64_MAX;
  for (size_t s = 0; s < servers_.size(); ++s) {
    bool any = false;
    for (const auto& sh : shards_) any = any || (sh.server == s && sh.unstarted);
    if (!any) continue;
    const auto t0 = Clock::now();
    for (uint32_t attempt = 0;; ++attempt) {
      try {
        if (!servers_[s].lost) take_deferred(s, config_.timeout, all, merged);
        bool waiting_still = false;
        for (const auto& sh : shards_)
          waiting_still = waiting_still || (sh.server == s && sh.pending());
        if (waiting_still)
          throw SystemError(
              "wire", "settle", __FILE__, __LINE__,
              fmt::format("region {}: the server of region {} did not answer the "
                          "deferred exchanges within {} ms",
                          config_.region, servers_[s].region, config_.timeout.count()));
        if (servers_[s].lost) rejoin(s);
        std::vector<bool> wanted(shards_.size());
        for (size_t i = 0; i < shards_.size(); ++i)
          wanted[i] = shards_[i].server == s && shards_[i].unstarted && shards_[i].resync;
        const std::vector<bool> wanted_before = wanted;
        resync(s, wanted, nullptr, released);
        for (size_t i = 0; i < shards_.size(); ++i) {
          auto& sh = shards_[i];
          if (sh.server != s || !sh.unstarted) continue;
          // The next exchange pushes it, in the round its server expects next.
          if (merged[i])
            sh.round_shift = static_cast<int64_t>(rounds_[sh.fragment]) -
                             static_cast<int64_t>(sh.pending_round + 1);
          else if (wanted[i] != wanted_before[i])
            --sh.round_shift;  // resync(): the server released the round this exchange counts
          sh.unstarted = false;
          out.push_back({sh.offset, sh.count});
        }
        spdlog::info(
            "region {}: settled the deferred shards of the server of region {} in "
            "{:.2f} s",
            config_.region, servers_[s].region, seconds_since(t0));
        break;
      } catch (const ServerLost& e) {
        if (attempt + 1 >= kMaxRejoinAttempts) throw;
        lose(s, e.what());
      }
    }
  }
  return out;
}

void RegionSync::rejoin(size_t s) {
  auto& link = servers_[s];
  const auto t0 = Clock::now();
  const auto deadline = t0 + config_.timeout;
  std::vector<uint64_t> ids;
  std::optional<wire::Reply> answer;
  // The hello is sent again after every heartbeat period without an answer: one sent while the
  // server was down may have died with the old connection.
  for (auto next_send = t0; !answer;) {
    const auto now = Clock::now();
    if (now >= deadline)
      throw SystemError("wire", "hello (rejoin)", __FILE__, __LINE__,
                        fmt::format("region {}: the server of region {} did not answer a hello "
                                    "within {} ms",
                                    config_.region, link.region, config_.timeout.count()));
    if (now >= next_send) {
      if (auto id = link.client->send(
              wire::Hello{config_.region, wire::kProtocolVersion, layout_.layout_hash(), {}}))
        ids.push_back(*id);
      heartbeat_others(s);
      next_send = now + config_.heartbeat;
    }
    auto reply = link.client->receive(std::max(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::min(next_send, deadline) - now),
        std::chrono::milliseconds(1)));
    if (reply && std::find(ids.begin(), ids.end(), reply->header.request_id) != ids.end())
      answer = std::move(reply);
  }
  if (auto* e = std::get_if<wire::Error>(&answer->header.body))
    throw InputError(fmt::format("region {}: the server of region {} refused the hello: {} ({})",
                                 config_.region, link.region, e->message,
                                 wire::error_code_name(e->code)));
  body_as<wire::HelloReply>(*answer, link.region);
  link.lost = false;
  link.last_contact = Clock::now();
  for (auto& sh : shards_)
    if (sh.server == s) sh.resync = true;
  ++rejoins_;
  spdlog::warn("region {}: rejoined the server of region {} after {:.2f} s", config_.region,
               link.region, seconds_since(t0));
}

void RegionSync::resync(size_t s, std::vector<bool>& wanted, RoundReport* report,
                        uint64_t& released) {
  // A rejoined server sends full values of its shards, and its round counter restarts at its
  // released round: map this region's rounds onto it (round_shift).
  std::vector<bool> take(shards_.size());
  for (size_t i = 0; i < shards_.size(); ++i) take[i] = wanted[i] && shards_[i].resync;
  std::vector<bool> only(servers_.size());
  only[s] = true;
  Pulls pulls = send_pulls(true, take, only);
  if (pulls.ids[s].empty()) return;
  auto replies = collect(*servers_[s].client, servers_[s].region, pulls.ids[s], config_.timeout,
                         "full pull (rejoined)", waiting(s, true));
  servers_[s].last_contact = Clock::now();
  for (auto& [id, reply] : replies) {
    const size_t i = pulls.shard_of[s].at(id);
    auto& sh = shards_[i];
    const auto server_released = body_as<wire::PullReply>(reply, servers_[s].region).round;
    const auto ours = static_cast<int64_t>(rounds_[sh.fragment]);
    const auto theirs = static_cast<int64_t>(server_released) + 1;  // it expects next
    if (theirs > ours) {
      // It released this round already (with our push: the reply was lost): the full values
      // are the round's result. Our next round is its next.
      sh.round_shift = ours - static_cast<int64_t>(server_released);
      wanted[i] = false;
    } else {
      // It lost rounds (restored an older checkpoint, or dropped our unreleased pushes): our
      // delta against these values carries them again.
      sh.round_shift = ours - theirs;
    }
    sh.resync = false;
    apply_pull(i, reply, report, released);
  }
}

void RegionSync::heartbeat_others(size_t busy) {
  const auto now = Clock::now();
  for (size_t o = 0; o < servers_.size(); ++o) {
    auto& link = servers_[o];
    if (o == busy || link.lost || now - link.last_contact < config_.heartbeat) continue;
    // Fire and forget: the reply is skipped by the next collect() on that server (an id it does
    // not wait for); a server that lost us says so at our next request there.
    if (link.client->send(wire::Heartbeat{})) link.last_contact = now;
  }
}

std::function<void()> RegionSync::others_alive(size_t busy) {
  return [this, busy] { heartbeat_others(busy); };
}

void RegionSync::keep_alive() {
  const auto now = Clock::now();
  for (size_t s = 0; s < servers_.size(); ++s) {
    auto& link = servers_[s];
    if (link.lost) {
      rejoin(s);  // register again now; its shards are pulled in full at their next exchange
      continue;
    }
    if (now - link.last_contact < config_.heartbeat) continue;
    // A server with deferred shards is probed by the exchanges that look for their replies
    // (take_deferred): it may be stopped, and waiting here would hold the connection.
    if (!pending_ids(s).empty()) continue;
    auto id = link.client->send(wire::Heartbeat{});
    if (!id) continue;  // queue full: the server is behind, and will hear from us soon anyway
    try {
      collect(*link.client, link.region, {*id}, config_.timeout, "heartbeat", waiting(s, true));
    } catch (const ServerLost& e) {
      lose(s, e.what());
      rejoin(s);
      continue;
    }
    link.last_contact = Clock::now();
  }
}

void RegionSync::goodbye(std::chrono::milliseconds wait) {
  std::vector<std::optional<uint64_t>> ids(servers_.size());
  for (size_t s = 0; s < servers_.size(); ++s)
    if (!servers_[s].lost && servers_[s].client)  // no client: connect() never reached it
      ids[s] = servers_[s].client->send(wire::Goodbye{});
  for (size_t s = 0; s < servers_.size(); ++s) {
    if (!ids[s]) continue;
    try {
      collect(*servers_[s].client, servers_[s].region, {*ids[s]}, wait, "goodbye",
              waiting(s, false));
    } catch (const std::exception& e) {
      spdlog::info("region {}: goodbye to the server of region {} not answered: {}", config_.region,
                   servers_[s].region, e.what());
    }
  }
}

// The uplink residuals, for a worker snapshot, and their restore on --resume: the state a
// region needs to continue its error feedback where it stopped.
std::map<std::string, std::vector<float>> RegionSync::residuals() const {
  std::map<std::string, std::vector<float>> out;
  for (const auto* ef : {&critical_ef_, &noncritical_ef_}) {
    const char* kind = ef == &critical_ef_ ? "critical" : "noncritical";
    for (uint64_t stream : ef->streams()) {
      const auto r = ef->residual(stream);
      out[fmt::format("{}.{}", kind, stream)].assign(r.begin(), r.end());
    }
  }
  return out;
}

void RegionSync::restore_residuals(const std::map<std::string, std::vector<float>>& residuals) {
  GT_ASSERT(!shards_.empty(), "restore_residuals() before connect()");
  // Every stream is one segment of one shard: check them all before changing any.
  std::vector<std::tuple<compression::ErrorFeedback*, uint64_t, const std::vector<float>*>>
      restores;
  for (const auto& [name, values] : residuals) {
    bool found = false;
    for (const auto& sh : shards_)
      for (const auto& seg : sh.segments) {
        const auto want =
            fmt::format("{}.{}", seg.critical ? "critical" : "noncritical", seg.stream);
        if (want != name) continue;
        GT_REQUIRE(values.size() == seg.count,
                   "region {}: error-feedback residual '{}' has {} values, its segment {}",
                   config_.region, name, values.size(), seg.count);
        restores.emplace_back(seg.critical ? &critical_ef_ : &noncritical_ef_, seg.stream, &values);
        found = true;
      }
    GT_REQUIRE(found,
               "region {}: error-feedback residual '{}' is not a stream of this table's shards",
               config_.region, name);
  }
  for (auto& [ef, stream, values] : restores) ef->set_residual(stream, *values);
}

}  // namespace geotrain::worker
