#pragma once
// What a region's leader runs on, from the worker's config: its link to every region's server
// (SyncConfig) and the streaming schedule (StreamingConfig). The native trainer and the Python
// binding's RegionLeader both build them here, so a Python leader exchanges exactly as a native
// one. Pure functions; they read CURVE key files when the config has CURVE on.
#include <cstdint>
#include <string>

#include "worker/config.hpp"
#include "worker/leader/region_sync.hpp"
#include "worker/leader/streaming_sync.hpp"

namespace geotrain::worker {

// Every server at c.server_endpoint(region, r) (routes through netsim included), with CURVE
// client keys when c.security has CURVE on (InputError naming a missing key file, or a region
// that is not one of c.regions). `tokens_per_round`: the samples one round's delta stands for,
// for the servers' token-weighted merge (0: weighted like every delta).
SyncConfig leader_sync_config(const WorkerConfig& c, const std::string& region,
                              uint64_t tokens_per_round);

// The fragment schedule and overlap rule; with time-budgeted rounds (worker.round_time_ms) the
// tokens one of `region`'s steps trains on, which its pushes carry.
StreamingConfig leader_streaming_config(const WorkerConfig& c, const std::string& region);

}  // namespace geotrain::worker
