// ParamServer's part of the end of a run (docs/protocol.md, "The flush"; docs/training.md, "The
// end of a run"): each region's flush push, kept by its shard until every live region has flushed
// it, and the final pulls, answered with the full values once the shard's flush is released. The
// rest of the loop is in param_server.cpp.
#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "core/values_hash.hpp"
#include "server/param_server.hpp"
#include "server/shard_kernels.hpp"

namespace geotrain::server {

using wire::ErrorCode;
using wire::WireError;

ParamServer::Outcome ParamServer::on_flush(uint32_t r, const wire::Header& h, const wire::Push& m,
                                           std::span<const wire::Frame> payloads) {
  const uint64_t id = h.request_id;
  Shard& shard = shard_for(m.shard, id);
  if (shard.flushed(r))
    throw WireError(
        ErrorCode::bad_round,
        fmt::format("push.flush: region {} flushed shard {} already", config_.regions[r], m.shard),
        id);
  // No segments: the region owes nothing (fp32 codecs); it still counts as flushed.
  ConstFloatSpan delta;
  if (!m.segments.empty()) {
    const auto read = push_payload_.read(m, payloads, shard.range().count, id);
    delta = read.values;
    if (!PushPayload::finite(read, payloads, id))
      throw WireError(ErrorCode::bad_payload, "push.flush: the flush contains NaN or infinity", id);
  }
  const bool kept = shard.add_flush(r, delta, m.tokens);
  auto& c = metrics_.region(r);
  for (const auto& f : payloads) c.bytes_in += f.size();
  if (!kept) {
    spdlog::warn(
        "flush: shard {} was released before region {} flushed it (it was not counted then); "
        "its flush is dropped",
        m.shard, config_.regions[r]);
    metrics_.event("flush_dropped", {{"shard", m.shard}, {"region", config_.regions[r]}});
  }
  reply(membership_.peer(r).value_or(std::string()), id, wire::PushReply{m.shard, m.round, 0, 0});
  release_rounds();  // releases the flush when this was the last live region's
  return Outcome::done;
}

void ParamServer::check_final_pull(uint32_t r, const Shard& shard, const wire::PullRequest& m,
                                   uint64_t request_id) const {
  if (!m.full)
    throw WireError(ErrorCode::malformed,
                    "pull.afterFlush needs pull.full: the final pull is of the full values",
                    request_id);
  // A region that has not flushed would wait for itself.
  if (!shard.flushed(r))
    throw WireError(ErrorCode::bad_round,
                    fmt::format("pull.afterFlush: region {} has not flushed shard {}",
                                config_.regions[r], m.shard),
                    request_id);
}

std::vector<bool> ParamServer::in_rounds(const Shard& shard, std::vector<bool> live) {
  for (size_t r = 0; r < live.size(); ++r)
    if (shard.flushed(r)) live[r] = false;
  return live;
}

void ParamServer::release_flushes(const std::vector<bool>& live_now) {
  for (auto& s : shards_) {
    const size_t merged = s.release_flush(live_now);
    if (merged == 0) continue;
    spdlog::info("flush: shard {} released with {} region(s)' flushes, version {}", s.range().id,
                 merged, s.version());
    // The values every region's final pull gets (the change from the model's initial values, as
    // the server holds them): `geotrain run` compares them with the regions'
    // (global_model_identical).
    metrics_.event("flush", {{"shard", s.range().id},
                             {"regions", merged},
                             {"version", s.version()},
                             {"hash", values_hash_hex(s.values())}});
  }
}

}  // namespace geotrain::server
