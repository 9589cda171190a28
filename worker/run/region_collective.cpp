#include "worker/run/region_collective.hpp"

#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "worker/backend/model_backend.hpp"
#include "worker/config.hpp"

namespace geotrain::worker {

namespace {
// How long a restarted worker waits to be admitted: the leader admits at its next round boundary
// (or sooner, at a regroup), and rounds can be long; a stop ends the wait earlier.
constexpr std::chrono::minutes kAdmission{30};
// How long a leader started again gives the members that outlived it to announce themselves (they
// noticed its death long before it is back; one in the middle of a step announces after it).
constexpr std::chrono::milliseconds kSettle{300};
}  // namespace

RegionCollective::RegionCollective(const WorkerConfig& config, const std::string& region,
                                   uint32_t rank, wire::Context& context, ModelBackend& backend,
                                   uint32_t generation, bool rejoin, std::stop_token stop)
    : config_(config), region_(region), rank_(rank), backend_(backend) {
  const uint32_t slots = config.workers.in(region);
  const bool elastic = config.elastic_in(region) && backend.can_reconnect_region();
  GT_REQUIRE(!rejoin || elastic,
             "--rejoin: worker {}-{} cannot rejoin its group (worker.elastic is off, or not on the "
             "CPU); restart the region's workers with --resume instead",
             region, rank);
  // A restarted group (generation > 0) must not meet the dead group's keys.
  const std::string prefix = (config.device_in(region) == "cuda" ? "nccl/" : "gloo/") + region +
                             "/" +
                             (generation > 0 ? fmt::format("g{}/", generation) : std::string());
  wire::ChannelOptions store_options;
  store_options.curve_client = wire::curve_client(config.security, region, region);
  spdlog::info("worker {}-{}: {} the region's other {} worker(s) at its server", region, rank,
               rejoin ? "rejoining" : "meeting", slots - 1);
  store_ = std::make_unique<ServerStore>(context, config.server_endpoint(region, region), prefix,
                                         config.timeout, store_options, std::move(stop));
  if (!elastic) {
    fixed_ = backend.connect_region(*store_, static_cast<int>(rank), static_cast<int>(slots),
                                    RegionOptions{config.gloo_host, config.timeout,
                                                  config.bucket_cap_mb, config.zero_stage == 2});
    return;
  }
  if (!rejoin) {
    group_.emplace(*store_, rank, slots, connect_with_backend());
    return;
  }
  if (rank == 0) {
    // The leader, started again: the members that outlived it wait for it.
    group_ = RegionGroup::lead_again(*store_, slots, connect_with_backend(), kSettle);
    if (!group_)
      throw SystemError("rendezvous", "lead_again", __FILE__, __LINE__,
                        fmt::format("no worker of region {} outlived its leader to take the "
                                    "region's state from; restart them all with --resume",
                                    region));
    return;
  }
  group_ = RegionGroup::join(*store_, rank, slots, connect_with_backend(), kAdmission);
  if (!group_)
    spdlog::info("worker {}-{}: the region's training ended before this worker was admitted",
                 region, rank);
}

RegionGroup::Connect RegionCollective::connect_with_backend() {
  return [this](gloo::rendezvous::Store& store, int rank, int size) {
    return backend_.connect_region(store, rank, size,
                                   RegionOptions{config_.gloo_host, config_.timeout,
                                                 config_.bucket_cap_mb, config_.zero_stage == 2});
  };
}

Communicator* RegionCollective::comm() {
  if (fixed_) return fixed_.get();
  return group_ && group_->connected() ? &group_->comm() : nullptr;
}

uint32_t RegionCollective::size() {
  if (fixed_) return static_cast<uint32_t>(fixed_->size());
  return group_ ? group_->size() : 1;
}

bool RegionCollective::joiners_waiting() {
  return group_ && group_->leader() && group_->joiners_waiting();
}

RegionGroup::Change RegionCollective::regroup(std::chrono::milliseconds window) {
  GT_ASSERT(group_.has_value(), "regroup of a region that is not elastic");
  for (;;) {
    backend_.disconnect_region();  // before its communicator goes
    try {
      return group_->regroup(window);
    } catch (const GroupBroken& e) {
      spdlog::warn("worker {}-{}: a member was lost while the group re-formed ({}); again", region_,
                   rank_, e.what());
    }
  }
}

void RegionCollective::close() {
  if (group_ && group_->leader()) group_->close();
}

}  // namespace geotrain::worker
