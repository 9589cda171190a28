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

ReplyWait RegionSync::waiting(size_t s, bool probe) {
  ReplyWait w;
  w.stop = stop_;
  if (probe) {
    w.probe = config_.heartbeat;
    w.on_probe = [this, s] { heartbeat_others(s); };
  }
  return w;
}

size_t RegionSync::deferred_shards() const {
  return static_cast<size_t>(
      std::count_if(shards_.begin(), shards_.end(), [](const auto& sh) { return sh.deferred(); }));
}

void RegionSync::take_deferred(size_t s, std::chrono::milliseconds wait,
                               const std::vector<bool>& wanted, std::vector<bool>& merged) {
  auto& link = links_[s];
  const auto deadline = Clock::now() + wait;
  uint64_t released = UINT64_MAX;  // a late shard's released round says nothing of this round
  auto mine = [&](size_t i) {
    return shards_[i].server == s && wanted[i] && shards_[i].in_flight();
  };
  for (;;) {
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < shards_.size(); ++i) {
      if (!mine(i)) continue;
      if (auto id = shards_[i].push_id()) ids.push_back(*id);
      if (auto id = shards_[i].pull_id()) ids.push_back(*id);
    }
    if (ids.empty()) return;
    const auto left =
        std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                 std::chrono::milliseconds(0));
    auto replies = link.collect_in_flight(ids, left, config_.heartbeat, waiting(s, false));
    bool progress = false;
    for (size_t i = 0; i < shards_.size(); ++i) {
      if (!mine(i)) continue;
      auto& sh = shards_[i];
      if (auto id = sh.push_id()) {
        if (auto it = replies.find(*id); it != replies.end()) {
          body_as<wire::PushReply>(it->second, link.region());  // an answer, not an error
          sh.push_answered();
          progress = true;
          if (!sh.pull_id()) {  // its server holds more of our shards: the pull goes now
            sh.pull(send_pull(i, sh.deferred_round()));
            link.leave_in_flight(*sh.pull_id());
          }
        }
      }
      if (!sh.push_id() && sh.pull_id()) {
        if (auto it = replies.find(*sh.pull_id()); it != replies.end()) {
          sh.pulled(apply_pull(i, it->second, nullptr, released));
          merged[i] = true;
          progress = true;
        }
      }
    }
    if (!progress && Clock::now() >= deadline) return;
  }
}

void RegionSync::hand_back_merged(LeaderShard& sh) {
  sh.round_shift =
      static_cast<int64_t>(rounds_[sh.fragment]) - static_cast<int64_t>(sh.deferred_round() + 1);
  sh.hand_back();
}

std::vector<ElementRange> RegionSync::take_ready(uint32_t fragment) {
  std::vector<bool> mine(shards_.size()), merged(shards_.size());
  for (size_t i = 0; i < shards_.size(); ++i)
    mine[i] = shards_[i].fragment == fragment && shards_[i].in_flight();
  for (size_t s = 0; s < links_.size(); ++s) {
    if (links_[s].lost()) continue;
    try {
      take_deferred(s, std::chrono::milliseconds(0), mine, merged);
    } catch (const ServerLost& e) {
      lose(s, e.what());  // the next exchange rejoins it and pulls its shards in full
    }
  }
  std::vector<ElementRange> out;
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (!merged[i]) continue;
    hand_back_merged(shards_[i]);
    out.push_back({shards_[i].offset, shards_[i].count});
  }
  return out;
}

std::vector<ElementRange> RegionSync::settle() {
  std::vector<ElementRange> out;
  for (size_t s = 0; s < links_.size(); ++s) {
    bool any = false;
    for (const auto& sh : shards_) any = any || (sh.server == s && sh.deferred());
    if (any) settle_server(s, out);
  }
  return out;
}

void RegionSync::settle_server(size_t s, std::vector<ElementRange>& out) {
  std::vector<bool> all(shards_.size(), true), merged(shards_.size());
  uint64_t released = UINT64_MAX;
  const auto t0 = Clock::now();
  for (uint32_t attempt = 0;; ++attempt) {
    try {
      if (!links_[s].lost()) take_deferred(s, config_.timeout, all, merged);
      for (const auto& sh : shards_)
        if (sh.server == s && sh.in_flight())
          throw SystemError(
              "wire", "settle", __FILE__, __LINE__,
              fmt::format("region {}: the server of region {} did not answer the "
                          "deferred exchanges within {} ms",
                          config_.region, links_[s].region(), config_.timeout.count()));
      if (links_[s].lost()) rejoin(s);
      std::vector<bool> wanted(shards_.size());
      for (size_t i = 0; i < shards_.size(); ++i)
        wanted[i] = shards_[i].server == s && shards_[i].phase() == ShardPhase::deferred_lost;
      const std::vector<bool> wanted_before = wanted;
      resync(s, wanted, nullptr, released);
      for (size_t i = 0; i < shards_.size(); ++i) {
        auto& sh = shards_[i];
        if (sh.server != s || !sh.deferred()) continue;
        if (merged[i]) {
          hand_back_merged(sh);
        } else {
          // resync(): the server released the round this exchange counts already.
          if (wanted[i] != wanted_before[i]) --sh.round_shift;
          sh.hand_back();
        }
        out.push_back({sh.offset, sh.count});
      }
      spdlog::info("region {}: settled the deferred shards of the server of region {} in {:.2f} s",
                   config_.region, links_[s].region(), seconds_since(t0));
      return;
    } catch (const ServerLost& e) {
      if (attempt + 1 >= kMaxRejoinAttempts) throw;
      lose(s, e.what());
    }
  }
}

void RegionSync::rejoin(size_t s) {
  const auto t0 = Clock::now();
  const auto hello = links_[s].rejoin(
      wire::Hello{config_.region, wire::kProtocolVersion, layout_.layout_hash(), {}},
      config_.timeout, config_.heartbeat, [this, s] { heartbeat_others(s); }, stop_);
  // What it holds of this region's flush: nothing after a restart from its checkpoint, all of
  // it when it only declared the region dead (a partition during the flush).
  for (const auto& info : hello.shards)
    for (auto& sh : shards_)
      if (sh.server == s && sh.id == info.id) sh.flush_held = info.flushed;
  ++rejoins_;
  spdlog::warn("region {}: rejoined the server of region {} after {:.2f} s", config_.region,
               links_[s].region(), seconds_since(t0));
}

void RegionSync::resync(size_t s, std::vector<bool>& wanted, RoundReport* report,
                        uint64_t& released) {
  // A rejoined server sends full values of its shards, and its round counter restarts at its
  // released round: map this region's rounds onto it (round_shift).
  std::map<uint64_t, size_t> sent;
  for (size_t i = 0; i < shards_.size(); ++i)
    if (wanted[i] && shards_[i].server == s && shards_[i].needs_full_pull())
      sent[send_full_pull(i)] = i;
  if (sent.empty()) return;
  std::vector<uint64_t> ids;
  for (const auto& [id, _] : sent) ids.push_back(id);
  auto replies = links_[s].collect(ids, config_.timeout, "full pull (rejoined)", waiting(s, true));
  for (auto& [id, reply] : replies) {
    const size_t i = sent.at(id);
    auto& sh = shards_[i];
    const auto server_released = body_as<wire::PullReply>(reply, links_[s].region()).round;
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
    sh.resynced(apply_pull(i, reply, report, released));
  }
}

void RegionSync::heartbeat_others(size_t busy) {
  // Fire and forget: the reply is skipped by the next collect() on that server (an id it does
  // not wait for); a server that lost us says so at our next request there.
  for (size_t o = 0; o < links_.size(); ++o)
    if (o != busy) links_[o].heartbeat_if_quiet(config_.heartbeat);
}

void RegionSync::keep_alive() {
  for (size_t s = 0; s < links_.size(); ++s) {
    auto& link = links_[s];
    if (link.lost()) {
      rejoin(s);  // register again now; its shards are pulled in full at their next exchange
      continue;
    }
    if (!link.quiet_for(config_.heartbeat)) continue;
    // A server with deferred shards is probed by the exchanges that look for their replies
    // (take_deferred): it may be stopped, and waiting here would hold the connection.
    if (link.has_in_flight()) continue;
    auto id = link.try_send(wire::Heartbeat{});
    if (!id) continue;  // queue full: the server is behind, and will hear from us soon anyway
    try {
      link.collect({*id}, config_.timeout, "heartbeat", waiting(s, true));
    } catch (const ServerLost& e) {
      lose(s, e.what());
      rejoin(s);
    }
  }
}

void RegionSync::goodbye(std::chrono::milliseconds wait) {
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
