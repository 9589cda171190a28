// ParamServer's part in standby shards (server/standby.hpp, docs/server.md "Standby shards"):
// as a standby, the replicas its primary sends, the takeover at a leader's hello once the primary
// is silent, and the hand-back when the primary restarts; as a primary, finding out after a stall
// that its standby serves them now. (Taking them back at the start is param_server_state.cpp's.)
#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "server/param_server.hpp"

namespace geotrain::server {

using wire::ErrorCode;
using wire::WireError;

namespace {
int64_t ms_between(TimePoint from, TimePoint to) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count();
}
}  // namespace

void ParamServer::forget_regions(const std::string& why) {
  for (uint32_t r = 0; r < membership_.size(); ++r)
    if (auto peer = membership_.peer(r)) forget_parked(*peer, why);
  membership_ = Membership(config_.regions, config_.dead_after, config_.wait_for_all_regions,
                           options_.clock(), config_.join_within);
  membership_.regions_were_running();
}

void ParamServer::require_standby(const wire::Header& h, const char* what, const char* does) const {
  if (!options_.standby)
    throw WireError(ErrorCode::malformed,
                    fmt::format("{} sent to the primary server of region {}: only a standby {} "
                                "(server.standby.endpoints)",
                                what, config_.regions[region_], does),
                    h.request_id);
}

bool ParamServer::take_over(const wire::Header& h) {
  const auto now = options_.clock();
  const auto& name = config_.regions[region_];
  if (!has_replica_)
    throw WireError(ErrorCode::not_serving,
                    fmt::format("the standby of region {}'s shards holds no replica of them yet: "
                                "their primary serves them",
                                name),
                    h.request_id);
  const auto silent = ms_between(primary_heard_, now);
  if (silent < config_.standby.takeover_after.count())
    throw WireError(ErrorCode::not_serving,
                    fmt::format("the standby of region {}'s shards heard from their primary {} ms "
                                "ago (it takes over after {} ms of silence): the primary serves "
                                "them",
                                name, silent, config_.standby.takeover_after.count()),
                    h.request_id);
  serving_ = true;
  ++takeovers_;
  forget_regions(fmt::format("the standby of region {} took its shards over", name));
  const uint64_t round = released_of(shards_);
  spdlog::warn(
      "standby of region {}: its primary silent for {} ms, a leader asks: serving its "
      "shards from the replica of round {}",
      name, silent, round);
  metrics_.event("takeover", {{"round", round}, {"primary_silent_ms", silent}});
  return true;
}

ParamServer::Outcome ParamServer::on_replica(const std::string& peer, const wire::Header& h,
                                             const wire::Replica& m,
                                             std::span<const wire::Frame> payloads) {
  const auto& name = config_.regions[region_];
  require_standby(h, "replica", "keeps replicas");
  if (serving_)
    throw WireError(ErrorCode::replaced,
                    fmt::format("the standby of region {} took its shards over at round {}", name,
                                released_of(shards_)),
                    h.request_id);
  const bool change = std::any_of(m.shards.begin(), m.shards.end(),
                                  [](const wire::ReplicaShard& s) { return s.change; });
  if (change && !has_replica_)
    throw WireError(ErrorCode::bad_round,
                    fmt::format("replica of a change, but the standby of region {} holds no "
                                "replica to add it to: send the values",
                                name),
                    h.request_id);
  if (!m.shards.empty()) {
    restore_from_replica(shards_, m, payloads, h.request_id);
    has_replica_ = true;
  } else if (!payloads.empty()) {
    throw WireError(ErrorCode::malformed,
                    fmt::format("replica of no shard carries {} frames", payloads.size()),
                    h.request_id);
  }
  primary_heard_ = options_.clock();
  reply(peer, h.request_id, wire::Ack{});
  return Outcome::answered;
}

ParamServer::Outcome ParamServer::on_take_back(const std::string& peer, const wire::Header& h) {
  const auto& name = config_.regions[region_];
  require_standby(h, "takeBack", "hands shards back");
  auto m = has_replica_ ? replica_of(shards_, config_.shard.optimizer.momentum != 0.0f, takeovers_)
                        : ReplicaMessage{};
  if (serving_) {
    serving_ = false;
    forget_regions(fmt::format("the primary of region {} took its shards back", name));
    spdlog::warn(
        "standby of region {}: handed its shards back to their restarted primary at "
        "round {}",
        name, released_of(shards_));
    metrics_.event("hand_back", {{"round", released_of(shards_)}});
  }
  primary_heard_ = options_.clock();
  reply(peer, h.request_id, std::move(m.replica), std::move(m.frames));
  return Outcome::done;
}

void ParamServer::after_stall(std::chrono::milliseconds stalled) {
  if (stalled < config_.heartbeat) return;
  // A standby that did not run did not hear its primary either.
  if (options_.standby && !serving_)
    primary_heard_ = std::min(primary_heard_ + stalled, options_.clock());
  // A primary that did not run may have been taken over meanwhile: it finds out before it reads
  // any region's message.
  if (standby_link_) standby_link_->confirm(config_.heartbeat);
}

}  // namespace geotrain::server
