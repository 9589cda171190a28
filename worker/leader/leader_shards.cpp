#include "worker/leader/leader_shards.hpp"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/error.hpp"

namespace geotrain::worker {

LeaderShards::LeaderShards(const ParamTable& layout, SyncConfig config, wire::Context& context)
    : layout_(layout),
      config_(std::move(config)),
      links_(config_, context),
      uplink_(config_.region, config_.critical_codec, config_.noncritical_codec,
              config_.error_feedback_decay) {
  base_.assign(layout_.total_elements(), 0.0f);
  motion_ = TensorMotion(layout_);
  GT_REQUIRE(config_.fragments >= 1 && config_.fragments <= 1024,
             "region {}: fragments is {}, must be in [1, 1024]", config_.region, config_.fragments);
  rounds_.assign(config_.fragment_count(), 1);
}

void LeaderShards::set_origin(ConstFloatSpan origin) {
  GT_REQUIRE(origin.size() == base_.size(), "region {}: origin has {} parameters, the table has {}",
             config_.region, origin.size(), base_.size());
  origin_.assign(origin.begin(), origin.end());
}

uint64_t LeaderShards::connect(uint64_t resume_at, ResumeRound how) {
  GT_ASSERT(how == ResumeRound::at_least || resume_at >= 1, "connect exactly at round {}",
            resume_at);
  links_.open();
  // A codec that factorises matrices needs each matrix's whole rows in a segment of their own.
  const Segments segments =
      config_.critical_codec.uses_shapes() || config_.noncritical_codec.uses_shapes()
          ? Segments::per_matrix_rows
      : config_.tensor_segments ? Segments::per_tensor
                                : Segments::per_class;
  auto hellos = greet(links_, hello(), layout_, segments, config_.timeout);
  hellos.adopt_layout(config_);
  shards_ = std::move(hellos.shards);
  for (auto& sh : shards_) sh.bind(base_, origin_, motion_);
  const uint32_t frags = config_.fragment_count();
  const uint64_t first =
      how == ResumeRound::exactly ? resume_at : std::max(hellos.first_round(), resume_at);
  rounds_.assign(frags, first);
  // A server that released rounds without us (we started late and were declared dead, or it
  // restarted) expects a later round: our rounds are mapped onto the furthest server's count
  // (round_shift), and the others are told we sat out the rounds between.
  shifts_.assign(frags, INT64_MAX);
  for (auto& sh : shards_) {
    const uint64_t next =
        sh.hello_next_round > 0 ? sh.hello_next_round : hellos.next_round[sh.server];
    sh.connected(next);
    sh.round_shift = static_cast<int64_t>(first) - static_cast<int64_t>(next);
  }
  same_shift_everywhere();
  for (uint32_t f = 0; f < frags; ++f) align(f);
  // A shard whose server still holds the zeros it started from needs no pull: base = origin.
  const Shards pulled = where([](const LeaderShard& sh) { return !sh.zero_start; });
  for (auto& sh : shards_)
    if (sh.zero_start) sh.start_from_origin();
  for (auto* sh : pulled) send_full_pull(*sh, FullPull::start);
  ShardTally tally;
  for (size_t s = 0; s < links_.size(); ++s)
    if (auto mine = on(s, pulled); !mine.empty())
      await(s, mine, config_.timeout, "pull", links_.waiting(s, false), tally);
  startup_bytes_pulled_ = tally.bytes_pulled;
  std::vector<int64_t> shifts;
  for (const auto& sh : shards_) shifts.push_back(sh.round_shift);
  spdlog::info(
      "region {}: connected to {} servers, {} shards in {} fragment(s), next round {}; pulled {} "
      "shard(s) in full ({} bytes), {} still zero; round shift per shard {}",
      config_.region, links_.size(), shards_.size(), frags, first, pulled.size(),
      startup_bytes_pulled_, shards_.size() - pulled.size(), fmt::join(shifts, " "));
  return first;
}

void LeaderShards::same_shift_everywhere() {
  int64_t lowest = INT64_MAX;
  for (const auto& sh : shards_) lowest = std::min(lowest, sh.round_shift);
  std::vector<uint32_t> sitting_out;
  for (auto& sh : shards_) {
    if (sh.round_shift == lowest) continue;
    if (std::find(sitting_out.begin(), sitting_out.end(), sh.fragment) == sitting_out.end())
      sitting_out.push_back(sh.fragment);
    sh.round_shift = lowest;
  }
  if (!sitting_out.empty())
    spdlog::info(
        "region {}: its servers expect a later round of some fragments than of others (a leader "
        "stopped between its fragments' pushes); fragment(s) {} sit out the rounds between, so "
        "that every fragment's rounds map onto the servers' shifted by {}",
        config_.region, fmt::join(sitting_out, ", "), lowest);
}

void LeaderShards::align(uint32_t fragment) {
  auto& shift = shifts_.at(fragment);
  const auto aligned = [&](const LeaderShard& sh) {
    return sh.fragment == fragment && sh.phase() == ShardPhase::idle;
  };
  const int64_t before = shift;
  for (const auto& sh : shards_)
    if (aligned(sh)) shift = std::min(shift, sh.round_shift);
  // Behind a server's frontier by more than the staleness bound (the other regions sat out rounds
  // this region still has to push there: it was away, or came back later than they did): sit
  // out the rounds up to it, on every server alike.
  const auto ours = static_cast<int64_t>(rounds_.at(fragment));
  int64_t behind = 0;
  for (const auto& sh : shards_)
    if (aligned(sh))
      behind = std::max(behind, static_cast<int64_t>(sh.frontier()) -
                                    static_cast<int64_t>(config_.staleness_bound) - (ours - shift));
  shift -= behind;
  for (auto& sh : shards_)
    if (aligned(sh)) sh.round_shift = shift;
  if (before != INT64_MAX && shift != before)
    spdlog::info(
        "region {}: fragment {}'s rounds now map onto its servers' shifted by {} (was {}){}",
        config_.region, fragment, shift, before,
        behind > 0 ? fmt::format(": {} round(s) behind a server's frontier", behind) : "");
}

void LeaderShards::hand_back(LeaderShard& sh, uint64_t our_next_round) {
  sh.hand_back(our_next_round, shifts_.at(sh.fragment));
  align(sh.fragment);
}

std::vector<ElementRange> LeaderShards::fragment_ranges(uint32_t fragment) const {
  std::vector<ElementRange> out;
  for (const auto& sh : shards_)
    if (sh.fragment == fragment) out.push_back(sh.range());
  return out;
}

LeaderShards::Shards LeaderShards::on(size_t s, const Shards& of) {
  Shards out;
  for (auto* sh : of)
    if (sh->server == s) out.push_back(sh);
  return out;
}

void LeaderShards::send_push(LeaderShard& sh, ConstFloatSpan local, bool flush, uint64_t& bytes,
                             uint32_t* segments) {
  uint32_t sent = 0;
  if (!flush) uplink_.use_codecs(our_round(sh));
  std::vector<wire::Frame> frames;
  auto push =
      sh.push_message(local, uplink_, sh.server_round(our_round(sh)),
                      flush ? config_.tokens_per_round : sh.tokens(), flush, frames, bytes, sent);
  if (segments) *segments += sent;
  const uint64_t round = push.round;
  const uint64_t id = links_[sh.server].send(std::move(push), std::move(frames));
  if (flush)
    sh.flush(id);
  else
    sh.push(id, round);
}

void LeaderShards::send_pull(LeaderShard& sh, uint64_t server_round) {
  // The oldest round the pull may see released: the staleness bound behind the round pushed.
  const uint64_t floor =
      server_round > config_.staleness_bound ? server_round - config_.staleness_bound : 0;
  sh.pull(links_[sh.server].send(wire::PullRequest{sh.id, sh.version, false, floor}));
}

void LeaderShards::send_full_pull(LeaderShard& sh, FullPull kind) {
  const uint64_t id =
      links_[sh.server].send(wire::PullRequest{sh.id, 0, true, 0, kind == FullPull::final});
  sh.full_pull(id, kind, our_round(sh));
}

bool LeaderShards::send_absent(LeaderShard& sh) {
  if (sh.push_id() || links_[sh.server].lost()) return false;
  const uint64_t round = sh.server_round(our_round(sh));
  // Only a round the server still expects of this region: later than a deferred shard's push;
  // for a merged one (pulled in full by this exchange: its server had lost this region), later
  // than the rounds released when it was pulled.
  const bool expected = sh.phase() == ShardPhase::deferred ? round > sh.deferred_round()
                        : sh.phase() == ShardPhase::merged ? !sh.released_round(our_round(sh))
                                                           : false;
  if (!expected) return false;
  wire::Push absent{sh.id, round, sh.version, {}, 0, false, false, true};
  return links_[sh.server].try_send(std::move(absent)).has_value();
}

void LeaderShards::await_requests(size_t s, const Shards& shards, std::chrono::milliseconds timeout,
                                  const char* what, ReplyWait how, ShardTally& tally,
                                  bool pushes_only) {
  std::vector<uint64_t> ids;
  for (const auto* sh : shards) {
    if (sh->push_id()) ids.push_back(*sh->push_id());
    if (!sh->pull_id()) continue;
    // A pull answered while only the pushes are awaited is kept for the wait that asks for it.
    (pushes_only ? how.parked_ids : ids).push_back(*sh->pull_id());
  }
  if (ids.empty()) return;
  auto replies = links_[s].collect(ids, timeout, what, std::move(how));
  for (auto* sh : shards) sh->take(replies, links_[s].region(), tally);
}

void LeaderShards::take_deferred(size_t s, const Shards& shards, std::chrono::milliseconds wait) {
  auto& link = links_[s];
  const auto deadline = Clock::now() + wait;
  ShardTally late;  // a late shard's bytes and released round say nothing of this round
  for (;;) {
    std::vector<uint64_t> ids;
    for (const auto* sh : shards) {
      if (!sh->in_flight()) continue;
      if (auto id = sh->push_id()) ids.push_back(*id);
      if (auto id = sh->pull_id()) ids.push_back(*id);
    }
    if (ids.empty()) return;
    const auto left =
        std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                 std::chrono::milliseconds(0));
    auto replies = link.collect_in_flight(ids, left, config_.heartbeat, links_.waiting(s, false));
    bool progress = false;
    for (auto* sh : shards) {
      if (!sh->in_flight() || !sh->take(replies, link.region(), late)) continue;
      progress = true;
      // Its push answered, its server holding more of our shards: the pull goes now.
      if (sh->in_flight() && !sh->push_id() && !sh->pull_id()) {
        send_pull(*sh, sh->deferred_round());
        link.leave_in_flight(*sh->pull_id());
      }
    }
    if (!progress && Clock::now() >= deadline) return;
  }
}

bool LeaderShards::silent(size_t s) {
  const Shards waiting = where(
      [&](const LeaderShard& sh) { return sh.server == s && sh.in_flight() && sh.push_id(); });
  if (waiting.empty()) return false;
  std::vector<uint64_t> ids;
  for (const auto* sh : waiting) ids.push_back(*sh->push_id());
  const auto answered = links_[s].look_in_flight(ids, config_.heartbeat, links_.waiting(s, false));
  return answered.size() < ids.size();
}

void LeaderShards::lose(size_t s, const std::string& why) {
  spdlog::warn("region {}: lost the server of region {} ({}); rejoining it", config_.region,
               links_[s].region(), why);
  links_[s].lose();
  for (auto& sh : shards_)
    if (sh.server == s) sh.lost();
}

wire::Hello LeaderShards::hello() const {
  return wire::Hello{config_.region, wire::kProtocolVersion, layout_.layout_hash(), {}};
}

bool LeaderShards::rejoin(size_t s, std::optional<std::chrono::milliseconds> within) {
  const auto reply = links_.rejoin(s, hello(), within);
  if (!reply) return false;
  // What it holds of this region's flush: nothing after a restart from its checkpoint, all of
  // it when it only declared the region dead (a partition during the flush).
  for (const auto& info : reply->shards)
    for (auto& sh : shards_)
      if (sh.server == s && sh.id == info.id) sh.flush_held = info.flushed;
  return true;
}

void LeaderShards::defer_away(size_t s, const Shards& shards) {
  for (auto* sh : on(s, shards))
    if (sh->phase() == ShardPhase::needs_resync) sh->defer_lost(sh->server_round(our_round(*sh)));
}

LeaderShards::Shards LeaderShards::resync(size_t s, const Shards& shards, ShardTally& tally) {
  Shards due;
  for (auto* sh : on(s, shards))
    if (sh->needs_full_pull()) due.push_back(sh);
  for (auto* sh : due) send_full_pull(*sh, FullPull::resync);
  await(s, due, config_.timeout, "full pull (rejoined)", links_.waiting(s, true), tally);
  Shards released;
  for (auto* sh : due)
    if (sh->released_round(our_round(*sh))) released.push_back(sh);
  return released;
}

LeaderShards::Shards LeaderShards::resync_lost(
    const Shards& shards, ShardTally& tally,
    const std::function<void(size_t, const ServerLost&)>& on_lost,
    std::optional<std::chrono::milliseconds> within) {
  Shards released;
  for (size_t s = 0; s < links_.size(); ++s) {
    const Shards mine = on(s, shards);
    const bool due = links_[s].lost() || std::any_of(mine.begin(), mine.end(), [](auto* sh) {
                       return sh->needs_full_pull();
                     });
    if (!due) continue;
    try {
      if (links_[s].lost() && !rejoin(s, within)) {
        defer_away(s, mine);
        continue;
      }
      for (auto* sh : resync(s, mine, tally)) released.push_back(sh);
    } catch (const ServerLost& e) {
      on_lost(s, e);
    }
  }
  return released;
}

void LeaderShards::keep_alive() {
  for (size_t s = 0; s < links_.size(); ++s) {
    if (!links_[s].lost()) {
      try {
        links_.probe_if_quiet(s);
        continue;
      } catch (const ServerLost& e) {
        lose(s, e.what());
      }
    }
    // Register again now (its shards are pulled in full at their next exchange); a server still
    // away is tried again at the next call (an answer that comes later counts then), so that an
    // exchange waiting for this thread does not wait for it.
    rejoin(s, std::min(config_.heartbeat, kKeepAliveLook));
  }
}

size_t LeaderShards::deferred() const {
  return static_cast<size_t>(
      std::count_if(shards_.begin(), shards_.end(), [](const auto& sh) { return sh.deferred(); }));
}

bool LeaderShards::flushed_before_connect() const {
  return std::any_of(shards_.begin(), shards_.end(),
                     [](const auto& sh) { return sh.flushed_before; });
}

void LeaderShards::restore_residuals(const std::map<std::string, std::vector<float>>& residuals) {
  GT_ASSERT(!shards_.empty(), "restore_residuals() before connect()");
  uplink_.restore(residuals, shards_);
}

}  // namespace geotrain::worker
