// ParamServer's durable state: the checkpoints it writes (server/checkpoint.hpp), and where its
// shards come from at the start: the newest verified checkpoint, or with server.standby the shards
// its standby hands back when they are at least as new (server/standby.hpp). The rest of the loop
// is in param_server.cpp.
#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "server/param_server.hpp"

namespace geotrain::server {

void ParamServer::restore() {
  if (options_.standby) return;  // its primary's replicas are what it holds
  std::vector<ShardRange> ranges;
  for (const auto& s : shards_) ranges.push_back(s.range());
  std::vector<std::string> skipped;
  auto state =
      checkpoints_.restore_latest(config_.state_hash(table_.layout_hash()), ranges, &skipped);
  for (const auto& why : skipped) spdlog::warn("checkpoint skipped, not loaded: {}", why);
  if (take_back(state ? std::optional(state->round) : std::nullopt)) return;
  if (!state) return;
  for (size_t i = 0; i < shards_.size(); ++i) {
    const auto& s = state->shards[i];
    shards_[i].restore(s.version, s.released_round, s.values, s.momentum);
  }
  last_checkpoint_round_ = state->round;
  membership_.regions_were_running();
  spdlog::info("restored checkpoint of round {} from {}", state->round,
               checkpoints_.dir().string());
  metrics_.event("restore", {{"round", state->round}});
}

bool ParamServer::take_back(std::optional<uint64_t> checkpoint_round) {
  if (!standby_link_) return false;
  auto got = standby_link_->take_back(config_.standby.takeover_after);
  if (!got || got->replica.shards.empty()) return false;
  const auto& name = config_.regions[region_];
  if (got->replica.shards.size() != shards_.size()) {
    spdlog::warn(
        "server {}: its standby handed back {} shard(s), this server holds {}: not "
        "taken",
        name, got->replica.shards.size(), shards_.size());
    return false;
  }
  uint64_t round = UINT64_MAX;
  for (const auto& s : got->replica.shards) round = std::min(round, s.released_round);
  if (checkpoint_round && *checkpoint_round > round) {
    spdlog::info(
        "server {}: its checkpoint (round {}) is newer than its standby's shards (round "
        "{}): restoring the checkpoint",
        name, *checkpoint_round, round);
    return false;
  }
  try {
    restore_from_replica(shards_, got->replica, got->frames, 0);
  } catch (const InputError& e) {
    spdlog::warn("server {}: the shards its standby handed back are refused: {}", name, e.what());
    return false;
  }
  last_checkpoint_round_ = round;
  membership_.regions_were_running();
  spdlog::info("server {}: took its shards back from its standby at {} (round {})", name,
               standby_link_->endpoint(), round);
  metrics_.event("restore", {{"round", round}, {"from", "standby"}});
  return true;
}

uint64_t ParamServer::checkpoint() {
  CheckpointState state;
  state.state_hash = config_.state_hash(table_.layout_hash());
  state.round = shards_.empty() ? 0 : UINT64_MAX;
  for (const auto& s : shards_) {
    state.round = std::min(state.round, s.released_round());
    state.shards.push_back({s.range(), s.version(), s.released_round(),
                            std::vector<float>(s.values().begin(), s.values().end()),
                            std::vector<float>(s.momentum().begin(), s.momentum().end())});
  }
  auto folder = checkpoints_.write(state);
  last_checkpoint_round_ = state.round;
  spdlog::info("checkpoint of round {} written to {}", state.round, folder.string());
  metrics_.event("checkpoint", {{"round", state.round}, {"path", folder.string()}});
  return state.round;
}

}  // namespace geotrain::server
