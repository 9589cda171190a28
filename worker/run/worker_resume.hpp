// A worker's side of `--resume` (docs/run.md, "Recovery: worker snapshots and --resume"): the
// region agrees on the newest snapshot every rank has, and its leader, once the servers said
// which round the region pushes next, keeps or drops the snapshot's uplink residuals and
// reports what it resumed from (the `resume` event).
//
// agree_on_snapshot() is a collective over the region's group (every rank calls it); the rest is
// local. Blocking file I/O.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "core/span.hpp"
#include "worker/leader/region_sync.hpp"
#include "worker/region/communicator.hpp"
#include "worker/run/worker_checkpoint.hpp"

namespace geotrain::worker {

// The newest snapshot round that every rank of the region has (each rank's newest that
// verifies; the minimum over the ranks), and this rank's snapshot of that round. None when some
// rank has none. Snapshots that fail verification are skipped with a warning naming the file;
// the agreed round must then verify on every rank (InputError otherwise). `comm`: the region's
// group (none: a region of one).
std::optional<WorkerCheckpointState> agree_on_snapshot(const WorkerCheckpointStore& store,
                                                       uint64_t identity, Communicator* comm,
                                                       uint32_t rank, uint32_t per_region);

// The leader's side, once the servers said the region pushes round `next`: restores the uplink
// residuals when the snapshot is of the round just before (nothing was lost in between) and
// drops them otherwise, and returns the `resume` event's fields.
nlohmann::json resume_leader(const std::optional<WorkerCheckpointState>& snapshot, uint64_t next,
                             RegionSync& sync, ConstFloatSpan params, const std::string& region);

}  // namespace geotrain::worker
