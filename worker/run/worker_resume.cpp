#include "worker/run/worker_resume.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

#include "core/error.hpp"
#include "core/metrics_events.hpp"

namespace geotrain::worker {

namespace {

namespace f = events::field;

// Rounds go through the region's float collective: exact up to 2^24.
constexpr uint64_t kMaxAgreedRound = uint64_t{1} << 24;

}  // namespace

std::optional<WorkerCheckpointState> agree_on_snapshot(const WorkerCheckpointStore& store,
                                                       uint64_t identity, Communicator* comm,
                                                       uint32_t rank, uint32_t per_region) {
  std::vector<std::string> skipped;
  auto newest = store.restore_latest(identity, &skipped);
  for (const auto& why : skipped) spdlog::warn("snapshot skipped, not loaded: {}", why);
  const uint64_t mine = newest ? newest->round : 0;
  GT_REQUIRE(mine < kMaxAgreedRound,
             "worker snapshot of round {} in '{}': rounds beyond {} cannot "
             "be agreed on",
             mine, store.dir().string(), kMaxAgreedRound);
  uint64_t agreed = mine;
  if (comm) {
    std::vector<float> rounds(per_region, 0.0f);
    rounds[rank] = static_cast<float>(mine);
    comm->allreduce_sum(rounds);
    agreed = static_cast<uint64_t>(*std::min_element(rounds.begin(), rounds.end()));
  }
  if (agreed == 0) return std::nullopt;
  if (newest && newest->round == agreed) return newest;
  return store.load_round(agreed, identity);
}

nlohmann::json resume_leader(const std::optional<WorkerCheckpointState>& snapshot, uint64_t next,
                             RegionSync& sync, ConstFloatSpan params, const std::string& region) {
  nlohmann::json j{{f::region, region}, {f::rank, 0}, {f::round, next}};
  if (!snapshot) {
    j[f::checkpoint_round] = nullptr;
    j[f::stale_rounds] = next - 1;
    j[f::rounds_replayed] = 0;
    j[f::residuals] = "none";
    return j;
  }
  const uint64_t from = snapshot->round + 1;
  j[f::checkpoint_round] = snapshot->round;
  // Rounds the servers released after the snapshot: their progress is in the servers' values,
  // the local optimizer state and residual of them are not in the snapshot.
  j[f::stale_rounds] = next > from ? next - from : 0;
  // Rounds the servers lost (they restored an older checkpoint): trained again.
  j[f::rounds_replayed] = next < from ? from - next : 0;
  if (next == from) {
    sync.restore_residuals(snapshot->residuals);
    j[f::residuals] = "restored";
    // The snapshot's parameters are the region's global values after its round, which the
    // servers hold too: a mismatch means the servers restored another state than this region's.
    size_t differ = 0;
    const auto base = sync.base();
    for (size_t i = 0; i < params.size(); ++i) differ += params[i] != base[i];
    j[f::parameters_match_servers] = differ == 0;
    if (differ > 0)
      spdlog::warn(
          "region {}: {} of {} parameters of the round-{} snapshot differ from the "
          "servers' values; training goes on from the servers'",
          region, differ, params.size(), snapshot->round);
  } else {
    j[f::residuals] = "dropped";
  }
  spdlog::info(
      "region {}: resumed at round {} from the snapshot of round {} ({} stale, {} "
      "replayed)",
      region, next, snapshot->round, j[f::stale_rounds].get<uint64_t>(),
      j[f::rounds_replayed].get<uint64_t>());
  return j;
}

}  // namespace geotrain::worker
