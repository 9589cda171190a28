// RegionCollective: how one worker reaches the other workers of its region: the rendezvous at the
// region's server (ServerStore, worker/region/server_store.hpp) and the Communicator over it,
// which is either
//  - elastic (worker.elastic on the CPU): a RegionGroup (worker/region/region_group.hpp) that
//    re-forms without a dead member and admits a restarted one; or
//  - fixed (device cuda, or worker.elastic false): a dead member ends the group, and the launcher
//    restarts every rank from its snapshots at a new generation.
// The backend's own connection (its gradient AllReduce) is made and dropped with it.
//
// Blocking: the constructor (the rendezvous, or a joiner's wait for admission) and regroup(); a
// stop (SIGTERM) ends their waits (Stopped). Not thread-safe: the trainer's thread. Borrows the
// backend, the config and the ZeroMQ context, which outlive it.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>

#include "wire/context.hpp"
#include "worker/region/communicator.hpp"
#include "worker/region/region_group.hpp"
#include "worker/region/server_store.hpp"

namespace geotrain::worker {

struct WorkerConfig;
class ModelBackend;

class RegionCollective {
 public:
  // Meets the region's other workers: as launched (every rank, under `generation`'s keys), or, with
  // `rejoin`, as a restarted worker of an elastic region, which waits until its leader admits it
  // (comm() null when training ended first), or, rank 0, leads the members that outlived it again
  // (SystemError when none did). InputError when `rejoin` is asked of a region that cannot take a
  // worker back (not elastic).
  RegionCollective(const WorkerConfig& config, const std::string& region, uint32_t rank,
                   wire::Context& context, ModelBackend& backend, uint32_t generation, bool rejoin,
                   std::stop_token stop);

  // The group's communicator (host spans); null for a joiner that found training over.
  Communicator* comm();
  bool elastic() const { return group_.has_value(); }
  // Members now (the slots launched, until one dies).
  uint32_t size();
  uint64_t epoch() const { return group_ ? group_->epoch() : 0; }

  // Elastic only. The leader, at a round boundary: whether a restarted worker waits to join.
  bool joiners_waiting();
  // Collective over the members alive (RegionGroup::regroup), again while a member dies during
  // it; `window`: how long the leader waits for the members it knew.
  RegionGroup::Change regroup(std::chrono::milliseconds window);
  // The leader, when training is over: joiners waiting or to come leave.
  void close();

 private:
  RegionGroup::Connect connect_with_backend();

  const WorkerConfig& config_;
  const std::string region_;
  const uint32_t rank_;
  ModelBackend& backend_;
  std::unique_ptr<ServerStore> store_;
  std::optional<RegionGroup> group_;     // elastic
  std::unique_ptr<Communicator> fixed_;  // not elastic
};

}  // namespace geotrain::worker
