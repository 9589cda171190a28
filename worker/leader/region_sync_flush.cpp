// RegionSync's part of the end of a run (docs/training.md, "The end of a run"; docs/protocol.md,
// "The flush"): the progress not pushed yet goes to the servers in fp32, and every shard comes
// back in full, the mean of what the regions hold, once every live region has flushed it. The
// exchange itself is in region_sync.cpp, the answers to lost servers in leader_shards.cpp.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "core/error.hpp"
#include "worker/leader/region_sync.hpp"
#include "worker/leader/reply_wait.hpp"

namespace geotrain::worker {

namespace {
[[noreturn]] void flush_failed(const std::string& region, const std::string& server,
                               const std::string& why) {
  throw SystemError("wire", "flush", __FILE__, __LINE__,
                    fmt::format("region {}: the flush at the server of region {} failed: {}",
                                region, server, why));
}
}  // namespace

// A server lost this region during the flush (it restarted from its checkpoint, or declared the
// region dead): what was in flight there is gone. flush() rejoins it and goes on: the shards it
// does not hold a flush of are flushed again.
struct RegionSync::FlushServerLost : std::runtime_error {
  FlushServerLost(size_t s, const std::string& why) : std::runtime_error(why), server(s) {}
  size_t server;
};

FlushReport RegionSync::flush(FloatSpan local, const MergeSettled& merge_settled) {
  const auto& config = shards_.config();
  GT_REQUIRE(local.size() == shards_.table_size(),
             "region {}: {} local parameters, the table has {}", config.region, local.size(),
             shards_.table_size());
  GT_ASSERT(shards_.connected(), "flush() before connect()");
  GT_ASSERT(merge_settled || shards_.deferred() == 0,
            "region {}: flush() with deferred shards needs their merge", config.region);
  for (size_t s = 0; s < shards_.servers(); ++s)
    if (const auto& link = shards_.link(s); !link.offers_flush())
      flush_failed(config.region, link.region(),
                   "it does not offer the flush (a build from before it)");
  FlushReport report;
  const auto t0 = Clock::now();
  for (uint32_t attempt = 0;; ++attempt) {
    try {
      flush_and_pull(local, merge_settled, report);
      break;
    } catch (const FlushServerLost& e) {
      if (attempt + 1 >= kMaxRejoinAttempts)
        flush_failed(config.region, shards_.link(e.server).region(),
                     fmt::format("lost this region {} times: {}", attempt + 1, e.what()));
      spdlog::warn(
          "region {}: the server of region {} lost this region during the flush ({}); rejoining "
          "it to flush again what it does not hold",
          config.region, shards_.link(e.server).region(), e.what());
      if (!shards_.link(e.server).lost()) shards_.lose(e.server, e.what());
      ++report.rejoins;
    }
  }
  // The uplink residuals are left out of the final model: dropped.
  shards_.drop_residuals();
  for (const auto* sh : shards_.where([](const LeaderShard&) { return true; }))
    if (sh->final_hash) report.shard_hashes.emplace_back(sh->id, *sh->final_hash);
  spdlog::info(
      "region {}: flushed {} segment(s) ({} bytes) and pulled the global model ({} bytes) in "
      "{:.2f} s",
      config.region, report.segments_owed, report.bytes_pushed, report.bytes_pulled,
      seconds_since(t0));
  return report;
}

void RegionSync::flush_and_pull(FloatSpan local, const MergeSettled& merge_settled,
                                FlushReport& report) {
  const auto t0 = Clock::now();
  // The flush owes a server local - its values: a server that lost this region since the last
  // exchange is registered again and its shards pulled in full first, as an exchange would.
  ShardTally resynced;
  shards_.resync_lost(shards_.where([](const LeaderShard&) { return true; }), resynced,
                      [](size_t s, const ServerLost& e) { throw FlushServerLost(s, e.what()); });
  // A shard its server holds a flush of (this leader's, or its predecessor's before a restart
  // after the end of the run) owes nothing more: its server refuses a second flush and answers
  // the final pull.
  flush_shards(
      shards_.where([](const LeaderShard& sh) { return !sh.deferred() && !sh.flush_held; }), local,
      report);
  flush_deferred(local, merge_settled, report);
  report.push_seconds += seconds_since(t0);
  const auto t1 = Clock::now();
  pull_final(report);
  report.pull_seconds += seconds_since(t1);
}

void RegionSync::flush_deferred(FloatSpan local, const MergeSettled& merge_settled,
                                FlushReport& report) {
  const auto& config = shards_.config();
  // Deferred shards go last, each as soon as its replies have come. A deferred push may wait at
  // its server for a round that another region, a push behind there (it merged the shard an
  // exchange later), never pushes: that region's flush of the shard takes it out of the shard's
  // rounds and so releases the round. Waiting for every deferred shard before flushing any could
  // wait for each other's last push, two regions each a push ahead on a shard of their own
  // (docs/training.md, "Deferred shards").
  const auto deadline = Clock::now() + config.timeout;
  while (shards_.deferred() > 0) {
    Shards ready;
    for (size_t s = 0; s < shards_.servers(); ++s) {
      const Shards mine =
          shards_.where([&](const LeaderShard& sh) { return sh.server == s && sh.in_flight(); });
      try {
        if (!mine.empty()) shards_.take_deferred(s, mine, kFlushPoll);
      } catch (const ServerLost& e) {
        throw FlushServerLost(s, e.what());
      }
      // Merged by its replies, or by the full pull after a rejoin.
      for (auto* sh : shards_.where([&](const LeaderShard& sh) {
             return sh.server == s && sh.phase() == ShardPhase::merged;
           })) {
        shards_.hand_back(*sh, shards_.our_round(*sh));
        merge_settled(sh->range());
        ready.push_back(sh);
      }
    }
    flush_shards(ready, local, report);
    // A server found lost meanwhile (the heartbeats sent while another server is awaited): what
    // it had of this region's flush is gone with it.
    for (const auto* sh : shards_.where(
             [](const LeaderShard& sh) { return sh.phase() == ShardPhase::deferred_lost; }))
      throw FlushServerLost(sh->server, "it lost this region with a deferred shard on the WAN");
    if (shards_.deferred() > 0 && Clock::now() >= deadline)
      throw SystemError("wire", "flush", __FILE__, __LINE__,
                        fmt::format("region {}: {} deferred shard(s) not answered within {} ms",
                                    config.region, shards_.deferred(), config.timeout.count()));
  }
}

void RegionSync::flush_shards(const Shards& shards, ConstFloatSpan local, FlushReport& report) {
  const auto& config = shards_.config();
  for (auto* sh : shards)
    shards_.send_push(*sh, local, true, report.bytes_pushed, &report.segments_owed);
  // Every server's answers are taken before a lost one is reported: the flushes the others
  // hold must not be sent again.
  std::optional<FlushServerLost> lost;
  ShardTally answers;
  for (size_t s = 0; s < shards_.servers(); ++s) {
    try {
      shards_.await(s, LeaderShards::on(s, shards), config.timeout, "flush",
                    shards_.waiting(s, true), answers);
    } catch (const ServerLost& e) {
      if (!lost) lost.emplace(s, e.what());
      shards_.lose(
          s, e.what());  // its shards are flushed again after the rejoin, unless it holds them
    }
  }
  if (lost) throw *lost;
}

void RegionSync::pull_final(FlushReport& report) {
  const auto& config = shards_.config();
  ShardTally pulled;
  Shards left = shards_.where([](const LeaderShard&) { return true; });
  while (!left.empty()) {
    // At most kMaxFinalPulls per server: each waits at its server until every region flushed.
    Shards sent;
    std::vector<size_t> per_server(shards_.servers());
    std::erase_if(left, [&](LeaderShard* sh) {
      if (per_server[sh->server] >= kMaxFinalPulls) return false;
      ++per_server[sh->server];
      shards_.send_full_pull(*sh, FullPull::final);
      sent.push_back(sh);
      return true;
    });
    for (size_t s = 0; s < shards_.servers(); ++s) {
      try {
        // As long as the server answers probes: it holds the pull until the slowest region has
        // flushed, which on an uneven fleet may be far more than one request's timeout away.
        auto how = shards_.waiting(s, true);
        how.while_answered = true;
        shards_.await(s, LeaderShards::on(s, sent), config.timeout, "final pull", std::move(how),
                      pulled);
      } catch (const ServerLost& e) {
        // A restarted server no longer holds this region's flush: flush() flushes it again. The
        // other final pulls are given up on (their replies skipped); the next attempt sends them
        // again.
        for (auto* sh : sent)
          if (sh->pull_id()) sh->give_up();
        report.bytes_pulled += pulled.bytes_pulled;
        throw FlushServerLost(s, e.what());
      }
    }
  }
  report.bytes_pulled += pulled.bytes_pulled;
}

}  // namespace geotrain::worker
