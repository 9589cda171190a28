#include "worker/leader/region_sync.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/error.hpp"

namespace geotrain::worker {

RoundReport RegionSync::exchange(ConstFloatSpan local, std::optional<uint32_t> fragment, bool defer,
                                 uint64_t tokens) {
  const auto& config = shards_.config();
  GT_REQUIRE(local.size() == shards_.table_size(),
             "region {}: {} local parameters, the table has {}", config.region, local.size(),
             shards_.table_size());
  GT_ASSERT(shards_.connected(), "exchange() before connect()");
  GT_ASSERT(!fragment || *fragment < config.fragment_count(), "fragment {} of {}", *fragment,
            config.fragment_count());
  defer = defer && config.shard_wait.count() > 0;
  const Shards wanted =
      shards_.where([&](const LeaderShard& sh) { return !fragment || sh.fragment == *fragment; });
  // Shards deferred before this exchange: not pushed in it (the caller did not start them).
  Shards skipped, take;
  for (auto* sh : wanted) {
    GT_ASSERT(defer || !sh->deferred(),
              "region {}: exchange without deferring while shard {} is deferred (settle() first)",
              config.region, sh->id);
    (sh->deferred() ? skipped : take).push_back(sh);
  }
  RoundReport report;
  report.fragment = fragment.value_or(0);
  report.round = shards_.round(report.fragment);
  ShardTally tally;
  // Servers that lost this region since the last round (keep_alive rejoined them) or that it
  // could not rejoin then: hello and full pulls first (neither waits on any round). A deferred
  // shard pulled in full here is merged with those values; a shard whose round its server
  // released already is not pushed again. Deferring, a server still away is only looked at
  // (kAwayLook, with a hello sent for the next look): its shards are deferred until a look finds
  // its answer. Waiting the shard wait here, before any push, made every round while it was away
  // the shard wait longer (1.4-1.7 s of training per server kill on the demo).
  const auto within =
      defer ? std::optional(std::min(shard_wait_.current(), kAwayLook)) : std::nullopt;
  const Shards released = shards_.resync_lost(
      wanted, tally,
      [&](size_t s, const ServerLost& e) {
        shards_.lose(s, e.what());  // redone in push_and_pull, in its turn
      },
      within);
  std::erase_if(take, [&](auto* sh) {
    if (sh->deferred()) skipped.push_back(sh);  // its server is away
    return sh->deferred() || std::find(released.begin(), released.end(), sh) != released.end();
  });
  // One shift for the fragment's shards (a resync may have lowered one of them).
  for (uint32_t f = 0; f < config.fragment_count(); ++f)
    if (!fragment || f == *fragment) shards_.align(f);
  // Deferred shards not pushed in this exchange (those just pulled in full too): their servers
  // release the round without them.
  for (auto* sh : skipped) shards_.send_absent(*sh);
  for (auto* sh : take) sh->set_tokens(tokens > 0 ? tokens : config.tokens_per_round);
  // A first exchange since connect() may wait a round for the others (kFirstExchangeWaits): its
  // time says nothing of a healthy exchange.
  bool first = false;
  for (uint32_t f = 0; f < config.fragment_count(); ++f)
    if (!fragment || f == *fragment) first = exchanges_.at(f)++ == 0 || first;
  const auto wait = first ? kFirstExchangeWaits * shard_wait_.current() : shard_wait_.current();
  push_and_pull(local, take, report, tally, defer, wait, defer && !first);
  if (defer) {
    report.shard_wait_seconds = std::chrono::duration<double>(wait).count();
    if (!first && !take.empty() &&
        std::none_of(take.begin(), take.end(),
                     [](const LeaderShard* sh) { return sh->deferred(); }))
      shard_wait_.healthy_exchange(report.push_seconds);
  }
  report.released_round = tally.released == UINT64_MAX ? 0 : tally.released;
  report.bytes_pulled += tally.bytes_pulled;
  report.max_staleness = tally.max_staleness;
  report.gate_wait_us = tally.gate_wait_us;
  report.held_for_silent = tally.held_for_silent;

  // Deferred shards pulled in full here (their server lost this region) go back to the caller;
  // they sat this round out (send_absent above), and push from the next exchange on.
  for (auto* sh : skipped)
    if (sh->phase() == ShardPhase::merged) shards_.hand_back(*sh, shards_.our_round(*sh) + 1);
  for (auto* sh : wanted)
    if (sh->deferred()) report.deferred.push_back(sh->range());
  if (fragment) {
    ++shards_.round(*fragment);
  } else {
    shards_.next_rounds();
  }
  return report;
}

std::chrono::milliseconds RegionSync::RoundClock::left() const {
  if (!defer) return timeout;
  return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(defer_at - Clock::now()),
                  std::chrono::milliseconds(0));
}

void RegionSync::push_and_pull(ConstFloatSpan local, const Shards& shards, RoundReport& report,
                               ShardTally& tally, bool defer, std::chrono::milliseconds wait,
                               bool skip_silent) {
  const auto& config = shards_.config();
  // Every push goes out before any reply is awaited. Shards of a server still lost, or not
  // pulled in full since it was rejoined, are redone in that server's turn below.
  std::vector<bool> redo_on(shards_.servers());
  std::vector<size_t> pushed_on(shards_.servers());
  const std::vector<bool> silent = silent_servers(shards, skip_silent);
  const auto t0 = Clock::now();
  for (auto* sh : shards) {
    if (shards_.link(sh->server).lost() || sh->needs_full_pull()) {
      redo_on[sh->server] = true;
      continue;
    }
    shards_.send_push(*sh, local, false, report.bytes_pushed);
    ++pushed_on[sh->server];
  }
  // The pulls go right behind the pushes, on the same connection (so the server sees each push
  // before its pull), saving a WAN round trip per round: a pull may name the round being pushed
  // and waits at the server until it is released. A server holds a push and a pull of ours for
  // each of its shards (wire::max_waiting_per_peer), and no shard has two exchanges in flight (a
  // fragment due again merges its last one first), so every pull can go.
  for (auto* sh : shards)
    if (sh->phase() == ShardPhase::pushing)
      shards_.send_pull(*sh, sh->server_round(shards_.our_round(*sh)));
  // Deferring: every server gets until shard_wait after the pushes; what has not come by then
  // stays in flight (the shard is deferred).
  const RoundClock clock{t0 + wait, defer, config.timeout};
  // Servers in the same order in every region: a leader that redoes its round on one server
  // (below) never waits there for a leader that waits on it at another.
  auto each_server = [&](const std::vector<bool>& busy, const char* what) {
    for (size_t s = 0; s < shards_.servers(); ++s) {
      if (redo_on[s]) {
        redo(s, local, LeaderShards::on(s, shards), clock, report, tally);
        continue;
      }
      if (!busy[s]) continue;
      try {
        await_round(s, clock, what, tally, silent[s]);
      } catch (const ServerLost& e) {
        shards_.lose(s, e.what());
        redo(s, local, LeaderShards::on(s, shards), clock, report, tally);
      }
    }
  };
  std::vector<bool> busy(shards_.servers());
  for (size_t s = 0; s < shards_.servers(); ++s) busy[s] = pushed_on[s] > 0;
  each_server(busy, "push and pull");
  report.push_seconds += seconds_since(t0);
}

std::vector<bool> RegionSync::silent_servers(const Shards& shards, bool look) {
  std::vector<bool> silent(shards_.servers());
  if (!look) return silent;
  for (size_t s = 0; s < shards_.servers(); ++s) {
    if (LeaderShards::on(s, shards).empty() || shards_.link(s).lost()) continue;
    try {
      silent[s] = shards_.silent(s);
    } catch (const ServerLost& e) {
      shards_.lose(s, e.what());  // its shards are redone in its turn (push_and_pull)
    }
  }
  return silent;
}

void RegionSync::await_round(size_t s, const RoundClock& clock, const char* what, ShardTally& tally,
                             bool look_only) {
  const Shards mine =
      shards_.where([&](const LeaderShard& sh) { return sh.server == s && sh.exchanging(); });
  ReplyWait how = shards_.waiting(s, true);
  how.partial = clock.defer;
  // A silent server (stopped, or cut off from this region) does not answer within a shard wait
  // either: this round's pushes wait there behind the earlier ones, deferred at once, and are
  // merged once it answers. Waiting a shard wait there at every fragment's exchange cost a
  // shard wait per fragment per stop (the LM demo under chaos, docs/benchmarks.md).
  // A live server answers a push at once and says whether the round it holds waits for a silent
  // region (wire::PushReply::awaited_silence_ms): then it is only looked at, as a silent server.
  bool held_for_silent = false;
  if (clock.defer && !look_only) {
    shards_.await_pushes(s, mine, clock.left(), what, how, tally);
    const auto silent_after = kSilentRegionHeartbeats * shards_.config().heartbeat;
    held_for_silent = std::any_of(mine.begin(), mine.end(), [&](const LeaderShard* sh) {
      return !sh->push_id() && sh->awaited_silence() >= silent_after;
    });
  }
  const auto wait = look_only || held_for_silent ? std::chrono::milliseconds(0) : clock.left();
  shards_.await(s, mine, wait, what, std::move(how), tally);
  // What has not come is deferred (its requests stay in flight, their replies parked until
  // take_ready() or settle() asks for them); a push answered without its pull waits for the
  // pulls that follow.
  for (auto* sh : mine) {
    if (!sh->exchanging() || sh->phase() == ShardPhase::pushed) continue;
    if (held_for_silent) ++tally.held_for_silent;
    sh->defer(sh->server_round(shards_.our_round(*sh)));
    for (auto id : {sh->push_id(), sh->pull_id()})
      if (id) shards_.link(s).leave_in_flight(*id);
  }
}

void RegionSync::redo(size_t s, ConstFloatSpan local, const Shards& shards, const RoundClock& clock,
                      RoundReport& report, ShardTally& tally) {
  const auto& config = shards_.config();
  auto& link = shards_.link(s);
  for (uint32_t attempt = 0; attempt < kMaxRejoinAttempts; ++attempt) {
    try {
      // Deferring, a server that is away (killed, restarting) is given what is left of the shard
      // wait: the region trains on, its shards there deferred until it is back.
      if (link.lost() &&
          !shards_.rejoin(s, clock.defer ? std::optional(clock.left()) : std::nullopt)) {
        shards_.defer_away(s, shards);
        return;
      }
      const Shards released = shards_.resync(s, shards, tally);
      Shards mine;
      for (auto* sh : shards)
        if (std::find(released.begin(), released.end(), sh) == released.end()) mine.push_back(sh);
      if (mine.empty()) return;  // it had released the round already
      // Each pull right behind its push, as in push_and_pull; deferred like any of the round when
      // they do not come in time: the region must not wait here for a region that deferred its
      // own (lost) push here and waits in turn at another server (after a netsim restart, every
      // region may be redoing a different one), nor for a push its server's gate holds.
      for (auto* sh : mine) shards_.send_push(*sh, local, false, report.bytes_pushed);
      for (auto* sh : mine) shards_.send_pull(*sh, sh->server_round(shards_.our_round(*sh)));
      await_round(s, clock, "push and pull (rejoined)", tally);
      return;
    } catch (const ServerLost& e) {
      shards_.lose(s, e.what());
    }
  }
  throw SystemError("wire", "exchange", __FILE__, __LINE__,
                    fmt::format("region {}: the server of region {} lost this region {} times in "
                                "one round; giving up",
                                config.region, link.region(), kMaxRejoinAttempts));
}

std::vector<ElementRange> RegionSync::take_ready(uint32_t fragment) {
  const Shards mine = shards_.where(
      [&](const LeaderShard& sh) { return sh.fragment == fragment && sh.in_flight(); });
  for (size_t s = 0; s < shards_.servers(); ++s) {
    if (shards_.link(s).lost()) continue;
    try {
      shards_.take_deferred(s, LeaderShards::on(s, mine), std::chrono::milliseconds(0));
    } catch (const ServerLost& e) {
      shards_.lose(s, e.what());  // the next exchange rejoins it and pulls its shards in full
    }
  }
  std::vector<ElementRange> out;
  for (auto* sh : mine) {
    if (sh->phase() != ShardPhase::merged) continue;
    shards_.hand_back(*sh, shards_.our_round(*sh));
    out.push_back(sh->range());
  }
  return out;
}

std::vector<ElementRange> RegionSync::settle() {
  std::vector<ElementRange> out;
  for (size_t s = 0; s < shards_.servers(); ++s)
    if (!LeaderShards::on(s, shards_.where([](const LeaderShard& sh) {
           return sh.deferred();
         })).empty())
      settle_server(s, out);
  return out;
}

void RegionSync::settle_server(size_t s, std::vector<ElementRange>& out) {
  const auto& config = shards_.config();
  const auto t0 = Clock::now();
  const auto of_s = [&](auto keep) {
    return shards_.where([&](const LeaderShard& sh) { return sh.server == s && keep(sh); });
  };
  for (uint32_t attempt = 0;; ++attempt) {
    try {
      if (!shards_.link(s).lost())
        shards_.take_deferred(s, of_s([](const LeaderShard& sh) { return sh.in_flight(); }),
                              config.timeout);
      if (!of_s([](const LeaderShard& sh) { return sh.in_flight(); }).empty())
        throw SystemError(
            "wire", "settle", __FILE__, __LINE__,
            fmt::format("region {}: the server of region {} did not answer the deferred exchanges "
                        "within {} ms",
                        config.region, shards_.link(s).region(), config.timeout.count()));
      if (shards_.link(s).lost()) shards_.rejoin(s);
      ShardTally tally;
      shards_.resync(
          s, of_s([](const LeaderShard& sh) { return sh.phase() == ShardPhase::deferred_lost; }),
          tally);
      for (auto* sh : of_s([](const LeaderShard& sh) { return sh.deferred(); })) {
        shards_.hand_back(*sh, shards_.our_round(*sh));
        out.push_back(sh->range());
      }
      spdlog::info("region {}: settled the deferred shards of the server of region {} in {:.2f} s",
                   config.region, shards_.link(s).region(), seconds_since(t0));
      return;
    } catch (const ServerLost& e) {
      if (attempt + 1 >= kMaxRejoinAttempts) throw;
      shards_.lose(s, e.what());
    }
  }
}

}  // namespace geotrain::worker
