#include "server/standby.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "core/error.hpp"
#include "wire/channel.hpp"
#include "wire/security_config.hpp"

namespace geotrain::server {

using wire::ErrorCode;
using wire::WireError;

namespace {

wire::Frame floats_frame(ConstFloatSpan v) { return wire::Frame(v.data(), v.size_bytes()); }

// The frame's floats, checked for its size; copied out (a frame's bytes need not be aligned).
std::vector<float> floats_of(const wire::Frame& f, size_t count, uint32_t shard, const char* what,
                             uint64_t request_id) {
  if (f.size() != count * sizeof(float))
    throw WireError(ErrorCode::malformed,
                    fmt::format("replica of shard {}: its {} frame has {} bytes, expected {} ({} "
                                "fp32 values)",
                                shard, what, f.size(), count * sizeof(float), count),
                    request_id);
  std::vector<float> out(count);
  std::memcpy(out.data(), f.data(), f.size());
  if (!std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); }))
    throw WireError(ErrorCode::bad_payload,
                    fmt::format("replica of shard {}: its {} hold NaN or infinity", shard, what),
                    request_id);
  return out;
}

}  // namespace

uint64_t released_of(const std::vector<Shard>& shards) {
  if (shards.empty()) return 0;
  uint64_t round = UINT64_MAX;
  for (const auto& s : shards) round = std::min(round, s.released_round());
  return round;
}

ReplicaMessage replica_of(const std::vector<Shard>& shards, bool momentum, uint64_t epoch) {
  ReplicaMessage out;
  out.replica.epoch = epoch;
  for (const auto& s : shards) {
    const bool m = momentum && !s.momentum().empty();
    out.replica.shards.push_back({s.range().id, s.version(), s.released_round(), m});
    out.frames.push_back(floats_frame(s.values()));
    if (m) out.frames.push_back(floats_frame(s.momentum()));
  }
  return out;
}

uint64_t restore_from_replica(std::vector<Shard>& shards, const wire::Replica& replica,
                              std::span<const wire::Frame> frames, uint64_t request_id) {
  size_t expected = 0;
  for (const auto& r : replica.shards) expected += r.momentum ? 2 : 1;
  if (frames.size() != expected)
    throw WireError(ErrorCode::malformed,
                    fmt::format("replica of {} shard(s) carries {} frames, expected {}",
                                replica.shards.size(), frames.size(), expected),
                    request_id);
  // Every check first: a refused replica restores nothing.
  struct Restore {
    Shard* shard;
    const wire::ReplicaShard* meta;
    std::vector<float> values, momentum;
  };
  std::vector<Restore> restores;
  std::set<uint32_t> seen;
  size_t f = 0;
  for (const auto& r : replica.shards) {
    auto it = std::find_if(shards.begin(), shards.end(),
                           [&](const Shard& s) { return s.range().id == r.id; });
    if (it == shards.end() || !seen.insert(r.id).second)
      throw WireError(ErrorCode::bad_shard,
                      fmt::format("replica names shard {}, which this server {}", r.id,
                                  it == shards.end() ? "does not hold" : "was given twice"),
                      request_id);
    const size_t n = it->range().count;
    Restore one{&*it, &r, floats_of(frames[f++], n, r.id, "values", request_id), {}};
    one.momentum = r.momentum ? floats_of(frames[f++], n, r.id, "momentum", request_id)
                              : std::vector<float>(it->momentum().size(), 0.0f);
    if (one.momentum.size() != it->momentum().size())
      throw WireError(ErrorCode::malformed,
                      fmt::format("replica of shard {} carries momentum; this server keeps none "
                                  "(server.optimizer.momentum differs between the two servers)",
                                  r.id),
                      request_id);
    restores.push_back(std::move(one));
  }
  uint64_t round = restores.empty() ? 0 : UINT64_MAX;
  for (auto& r : restores) {
    r.shard->restore(r.meta->version, r.meta->released_round, r.values, r.momentum);
    round = std::min(round, r.meta->released_round);
  }
  return round;
}

StandbyLink::StandbyLink(const ServerConfig& config, uint32_t region, zmq::context_t& context)
    : region_(config.regions.at(region)),
      every_rounds_(config.standby.every_rounds),
      heartbeat_(config.heartbeat) {
  const auto it = config.standby.endpoints.find(region_);
  GT_REQUIRE(it != config.standby.endpoints.end(),
             "server.standby.endpoints has no entry for region '{}' (where the standby of its "
             "shards listens, in the server of region {})",
             region_, config.regions[standby_host(region, config.regions.size())]);
  endpoint_ = it->second;
  wire::ChannelOptions options;
  options.curve_client = wire::curve_client(config.security, region_, region_);
  options.max_frame_bytes = config.max_message_bytes;
  options.send_hwm = options.receive_hwm = 4;  // a replica more is worth nothing while one waits
  client_ = std::make_unique<wire::Client>(wire::connect_dealer(context, endpoint_, options));
}

void StandbyLink::check(const wire::Reply& reply) const {
  const auto* e = std::get_if<wire::Error>(&reply.header.body);
  if (e && e->code == ErrorCode::replaced)
    throw Replaced(
        fmt::format("server {}: its standby at {} serves its shards now ({}): this "
                    "server stops; restarted, it takes them back",
                    region_, endpoint_, e->message));
  if (e)
    spdlog::warn("server {}: its standby at {} refused a replica: {} ({})", region_, endpoint_,
                 e->message, wire::error_code_name(e->code));
}

void StandbyLink::drain() {
  while (auto reply = client_->receive(std::chrono::milliseconds(0))) check(*reply);
}

std::optional<StandbyLink::TakenBack> StandbyLink::take_back(std::chrono::milliseconds wait) {
  const auto id = client_->send(wire::TakeBack{});
  if (!id) return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    auto reply = client_->receive(left);
    if (!reply) break;
    if (reply->header.request_id != *id) continue;
    if (auto* r = std::get_if<wire::Replica>(&reply->header.body))
      return TakenBack{*r, std::move(reply->payloads)};
    const auto* e = std::get_if<wire::Error>(&reply->header.body);
    spdlog::warn("server {}: its standby at {} refused to hand its shards back: {}", region_,
                 endpoint_, e ? e->message : wire::body_name(reply->header.body));
    return std::nullopt;
  }
  spdlog::warn("server {}: its standby at {} did not answer within {} ms: no shards taken back",
               region_, endpoint_, wait.count());
  return std::nullopt;
}

void StandbyLink::pump(const std::vector<Shard>& shards, bool momentum, TimePoint now) {
  drain();
  const uint64_t released = released_of(shards);
  const bool due = released >= sent_round_ + every_rounds_;
  if (!due && last_send_ && now - *last_send_ < heartbeat_) return;
  std::optional<uint64_t> id;
  if (due) {
    auto m = replica_of(shards, momentum, 0);
    uint64_t bytes = 0;
    for (const auto& f : m.frames) bytes += f.size();
    id = client_->send(std::move(m.replica), std::move(m.frames));
    if (id) {
      sent_round_ = released;
      bytes_sent_ += bytes;
      ++replicas_sent_;
    }
  } else {
    id = client_->send(wire::Replica{});
  }
  if (id) last_send_ = now;
}

void StandbyLink::confirm(std::chrono::milliseconds wait) {
  drain();
  const auto id = client_->send(wire::Replica{});
  if (!id) return;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    auto reply = client_->receive(left);
    if (!reply) return;
    check(*reply);
    if (reply->header.request_id == *id) return;
  }
}

}  // namespace geotrain::server
