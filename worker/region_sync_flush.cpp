// RegionSync's part of the end of a run (docs/training.md, "The end of a run"; docs/protocol.md,
// "The flush"): the progress not pushed yet goes to the servers in fp32, and every shard comes
// back in full, the mean of what the regions hold, once every live region has flushed it. The
// exchange itself is in region_sync.cpp, the answers to lost servers in region_sync_recovery.cpp.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "compression/codecs.hpp"
#include "compression/payload.hpp"
#include "core/error.hpp"
#include "worker/region_sync.hpp"
#include "worker/reply_wait.hpp"

namespace geotrain::worker {

namespace {
bool all_zero(ConstFloatSpan x) {
  return std::all_of(x.begin(), x.end(), [](float v) { return v == 0.0f; });
}

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

bool RegionSync::flushed_before_connect() const {
  return std::any_of(shards_.begin(), shards_.end(),
                     [](const auto& sh) { return sh.flushed_before; });
}

FlushReport RegionSync::flush(FloatSpan local, const MergeSettled& merge_settled) {
  GT_REQUIRE(local.size() == base_.size(), "region {}: {} local parameters, the table has {}",
             config_.region, local.size(), base_.size());
  GT_ASSERT(!shards_.empty(), "flush() before connect()");
  GT_ASSERT(merge_settled || deferred_shards() == 0,
            "region {}: flush() with deferred shards needs their merge", config_.region);
  for (const auto& link : links_)
    if (!link.offers_flush())
      flush_failed(config_.region, link.region(),
                   "it does not offer the flush (a build from before it)");
  delta_.resize(base_.size());

  FlushReport report;
  const auto t0 = Clock::now();
  for (uint32_t attempt = 0;; ++attempt) {
    try {
      flush_and_pull(local, merge_settled, report);
      break;
    } catch (const FlushServerLost& e) {
      if (attempt + 1 >= kMaxRejoinAttempts)
        flush_failed(config_.region, links_[e.server].region(),
                     fmt::format("lost this region {} times: {}", attempt + 1, e.what()));
      spdlog::warn(
          "region {}: the server of region {} lost this region during the flush ({}); rejoining "
          "it to flush again what it does not hold",
          config_.region, links_[e.server].region(), e.what());
      lose(e.server, e.what());
      ++report.rejoins;
    }
  }
  // The uplink residuals are left out of the final model: dropped.
  for (const auto& sh : shards_)
    for (const auto& seg : sh.segments)
      (seg.critical ? critical_ef_ : noncritical_ef_).reset(seg.stream);
  spdlog::info(
      "region {}: flushed {} segment(s) ({} bytes) and pulled the global model ({} bytes) in "
      "{:.2f} s",
      config_.region, report.segments_owed, report.bytes_pushed, report.bytes_pulled,
      seconds_since(t0));
  return report;
}

void RegionSync::flush_and_pull(FloatSpan local, const MergeSettled& merge_settled,
                                FlushReport& report) {
  const auto t0 = Clock::now();
  resync_before_flush();
  // A shard its server holds a flush of (this leader's, or its predecessor's before a restart
  // after the end of the run) owes nothing more: its server refuses a second flush and answers
  // the final pull.
  std::vector<bool> first(shards_.size());
  for (size_t i = 0; i < shards_.size(); ++i)
    first[i] = !shards_[i].deferred() && !shards_[i].flush_held;
  flush_shards(first, local, report);
  flush_deferred(local, merge_settled, report);
  report.push_seconds += seconds_since(t0);
  const auto t1 = Clock::now();
  pull_final(report);
  report.pull_seconds += seconds_since(t1);
}

void RegionSync::flush_deferred(FloatSpan local, const MergeSettled& merge_settled,
                                FlushReport& report) {
  // Deferred shards go last, each as soon as its replies have come. A deferred push may wait at
  // its server for a round that another region, a push behind there (it merged the shard an
  // exchange later), never pushes: that region's flush of the shard takes it out of the shard's
  // rounds and so releases the round. Waiting for every deferred shard before flushing any could
  // wait for each other's last push, two regions each a push ahead on a shard of their own
  // (docs/training.md, "Deferred shards").
  const auto deadline = Clock::now() + config_.timeout;
  while (deferred_shards() > 0) {
    std::vector<bool> ready(shards_.size());
    for (size_t s = 0; s < links_.size(); ++s) {
      std::vector<bool> mine(shards_.size()), merged(shards_.size());
      bool any = false;
      for (size_t i = 0; i < shards_.size(); ++i) {
        mine[i] = shards_[i].server == s && shards_[i].in_flight();
        any = any || mine[i];
      }
      try {
        if (any) take_deferred(s, kFlushPoll, mine, merged);
      } catch (const ServerLost& e) {
        throw FlushServerLost(s, e.what());
      }
      for (size_t i = 0; i < shards_.size(); ++i) {
        auto& sh = shards_[i];
        if (sh.server != s || sh.phase() != ShardPhase::merged) continue;
        // Merged by its replies, or by the full pull after a rejoin, which mapped its rounds
        // onto the server's count already (resync()).
        if (merged[i])
          hand_back_merged(sh);
        else
          sh.hand_back();
        merge_settled({sh.offset, sh.count});
        ready[i] = true;
      }
    }
    flush_shards(ready, local, report);
    // A server found lost meanwhile (the heartbeats sent while another server is awaited): what
    // it had of this region's flush is gone with it.
    for (const auto& sh : shards_)
      if (sh.deferred() && !sh.in_flight() && sh.phase() != ShardPhase::merged)
        throw FlushServerLost(sh.server, "it lost this region with a deferred shard on the WAN");
    if (deferred_shards() > 0 && Clock::now() >= deadline)
      throw SystemError("wire", "flush", __FILE__, __LINE__,
                        fmt::format("region {}: {} deferred shard(s) not answered within {} ms",
                                    config_.region, deferred_shards(), config_.timeout.count()));
  }
}

void RegionSync::flush_shards(const std::vector<bool>& which, ConstFloatSpan local,
                              FlushReport& report) {
  std::vector<std::vector<uint64_t>> ids(links_.size());
  for (size_t i = 0; i < shards_.size(); ++i)
    if (which[i]) ids[shards_[i].server].push_back(send_flush(i, local, report));
  // Every server's answers are taken before a lost one is reported: the flushes the others
  // hold must not be sent again.
  std::optional<FlushServerLost> lost;
  for (size_t s = 0; s < links_.size(); ++s) {
    if (ids[s].empty()) continue;
    try {
      auto replies = links_[s].collect(ids[s], config_.timeout, "flush", waiting(s, true));
      for (const auto& [id, reply] : replies) body_as<wire::PushReply>(reply, links_[s].region());
    } catch (const ServerLost& e) {
      if (!lost) lost.emplace(s, e.what());
      continue;
    }
    for (size_t i = 0; i < shards_.size(); ++i)
      if (which[i] && shards_[i].server == s) shards_[i].flush_held = true;
  }
  if (lost) throw *lost;
}

void RegionSync::resync_before_flush() {
  // The flush owes a server local - its values: a server that lost this region since the last
  // exchange is registered again and its shards pulled in full first, as an exchange would.
  uint64_t released = UINT64_MAX;
  for (size_t s = 0; s < links_.size(); ++s) {
    bool due = links_[s].lost();
    for (const auto& sh : shards_) due = due || (sh.server == s && sh.needs_full_pull());
    if (!due) continue;
    try {
      if (links_[s].lost()) rejoin(s);
      std::vector<bool> wanted(shards_.size(), true);
      resync(s, wanted, nullptr, released);
    } catch (const ServerLost& e) {
      throw FlushServerLost(s, e.what());
    }
  }
}

uint64_t RegionSync::send_flush(size_t i, ConstFloatSpan local, FlushReport& report) {
  const auto& sh = shards_[i];
  wire::Push push{sh.id, server_round(sh), sh.version, {}, config_.tokens_per_round, true};
  std::vector<zmq::message_t> frames;
  for (const auto& seg : sh.segments) {
    const uint64_t at = sh.offset + seg.offset;
    for (uint64_t j = at; j < at + seg.count; ++j) delta_[j] = local[j] - base_[j];
    const auto g = ConstFloatSpan(delta_).subspan(at, seg.count);
    // Only the progress not pushed yet: the uplink residual is compression error still owed,
    // which the final model leaves out (docs/training.md, "The end of a run").
    if (all_zero(g)) continue;
    Bytes payload;
    compression::make_fp32_codec()->encode(g, payload);
    push.segments.push_back(
        {seg.offset, seg.count, static_cast<uint8_t>(compression::CodecId::fp32), payload.size()});
    report.bytes_pushed += payload.size();
    ++report.segments_owed;
    frames.push_back(wire::frame_from_bytes(std::move(payload)));
  }
  return links_[sh.server].send(std::move(push), std::move(frames));
}

void RegionSync::pull_final(FlushReport& report) {
  RoundReport pulled_bytes;
  uint64_t released = UINT64_MAX;
  std::vector<bool> pulled(shards_.size());
  for (;;) {
    std::vector<std::map<uint64_t, size_t>> sent(links_.size());
    for (size_t i = 0; i < shards_.size(); ++i) {
      const auto& sh = shards_[i];
      if (pulled[i] || sent[sh.server].size() >= kMaxFinalPulls) continue;
      sent[sh.server][links_[sh.server].send(wire::PullRequest{sh.id, 0, true, 0, true})] = i;
    }
    bool any = false;
    for (size_t s = 0; s < links_.size(); ++s) {
      if (sent[s].empty()) continue;
      any = true;
      std::vector<uint64_t> ids;
      for (const auto& [id, _] : sent[s]) ids.push_back(id);
      try {
        auto replies = links_[s].collect(ids, config_.timeout, "final pull", waiting(s, true));
        for (auto& [id, reply] : replies) {
          const size_t i = sent[s].at(id);
          shards_[i].set_version(apply_pull(i, reply, &pulled_bytes, released));
          pulled[i] = true;
        }
      } catch (const ServerLost& e) {
        // A restarted server no longer holds this region's flush: flush() flushes it again.
        report.bytes_pulled += pulled_bytes.bytes_pulled;
        throw FlushServerLost(s, e.what());
      }
    }
    if (!any) break;
  }
  report.bytes_pulled += pulled_bytes.bytes_pulled;
}

}  // namespace geotrain::worker
