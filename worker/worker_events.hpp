// The fields of the worker's metrics events (docs/run-folder.md) that both writers build, the
// native trainer and the Python API (python/geotrain/torch.py, through the binding), named by the
// schema (core/metrics_events.json, the generated events::field constants): one definition of
// how a round's exchanges become the `round` event's fields.
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "worker/region_sync.hpp"

namespace geotrain::worker {

// The exchanges merged in one round (one per round without streaming), as the round event's
// fields: bytes and seconds summed, the worst staleness and gate wait, the last exchange's round
// (merged_round) and released round, the largest single exchange (what streaming divides by P),
// deferred and late shards. An empty object when there were none.
nlohmann::json exchange_fields(const std::vector<RoundReport>& reports);

// One exchange's report as the Python API hands it out (RegionSync.step, StreamingSync
// after_step): round, fragment, bytes, seconds, staleness, gate wait, released round, deferred
// and late shards.
nlohmann::json report_fields(const RoundReport& r);

}  // namespace geotrain::worker
