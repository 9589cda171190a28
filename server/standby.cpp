#include "server/standby.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "compression/factory.hpp"
#include "compression/payload.hpp"
#include "core/error.hpp"
#include "wire/channel.hpp"
#include "wire/security_config.hpp"

namespace geotrain::server {

using wire::ErrorCode;
using wire::WireError;

namespace {

wire::Frame floats_frame(ConstFloatSpan v) { return wire::Frame(v.data(), v.size_bytes()); }

// `base` plus the change a payload frame holds (of base.size() elements), checked whole.
std::vector<float> changed(ConstFloatSpan base, const wire::Frame& f, uint32_t shard,
                           const char* what, uint64_t request_id) {
  std::vector<float> out(base.begin(), base.end());
  try {
    compression::decode_add_payload(f.bytes(), out);
  } catch (const InputError& e) {
    throw WireError(ErrorCode::bad_payload,
                    fmt::format("replica of shard {}: its {} change: {}", shard, what, e.what()),
                    request_id);
  }
  if (!std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); }))
    throw WireError(ErrorCode::bad_payload,
                    fmt::format("replica of shard {}: its {} hold NaN or infinity", shard, what),
                    request_id);
  return out;
}

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
    if (r.change && it->version() != r.base_version)
      throw WireError(ErrorCode::bad_round,
                      fmt::format("replica of shard {} is a change since version {}, this standby "
                                  "holds version {}: send the values",
                                  r.id, r.base_version, it->version()),
                      request_id);
    if (r.momentum && it->momentum().empty())
      throw WireError(ErrorCode::malformed,
                      fmt::format("replica of shard {} carries momentum; this server keeps none "
                                  "(server.optimizer.momentum differs between the two servers)",
                                  r.id),
                      request_id);
    const auto& values_frame = frames[f++];
    const wire::Frame* momentum_frame = r.momentum ? &frames[f++] : nullptr;
    Restore one{&*it, &r, {}, {}};
    one.values = r.change ? changed(it->values(), values_frame, r.id, "values", request_id)
                          : floats_of(values_frame, it->range().count, r.id, "values", request_id);
    if (!momentum_frame)
      one.momentum.assign(it->momentum().size(), 0.0f);
    else if (r.change)
      one.momentum = changed(it->momentum(), *momentum_frame, r.id, "momentum", request_id);
    else
      one.momentum = floats_of(*momentum_frame, it->range().count, r.id, "momentum", request_id);
    restores.push_back(std::move(one));
  }
  uint64_t round = restores.empty() ? 0 : UINT64_MAX;
  for (auto& r : restores) {
    r.shard->restore(r.meta->version, r.meta->released_round, r.values, r.momentum);
    round = std::min(round, r.meta->released_round);
  }
  return round;
}

ReplicaEncoder::ReplicaEncoder(const std::string& codec_spec, uint64_t anchor_every)
    : anchor_every_(anchor_every) {
  auto codec = compression::make_codec(codec_spec);
  if (!codec->lossless()) codec_ = std::move(codec);
}

void ReplicaEncoder::anchor(ConstFloatSpan now, Stream& s) {
  if (!codec_) return;  // fp32: nothing to track
  s.held.assign(now.begin(), now.end());
  s.residual.assign(now.size(), 0.0f);
}

wire::Frame ReplicaEncoder::change(ConstFloatSpan now, Stream& s) {
  // x = (now - held) + residual; the standby adds D(C(x)); the residual keeps what it missed.
  auto& x = s.residual;
  for (size_t i = 0; i < x.size(); ++i) x[i] += now[i] - s.held[i];
  codec_->encode(x, scratch_);
  decoded_.assign(x.size(), 0.0f);
  compression::decode_payload(scratch_, decoded_);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] -= decoded_[i];
    s.held[i] += decoded_[i];
  }
  return wire::Frame(scratch_.data(), scratch_.size());
}

ReplicaMessage ReplicaEncoder::next(const std::vector<Shard>& shards, bool momentum) {
  if (!codec_ || anchor_due_ || since_anchor_ + 1 >= anchor_every_) {
    for (const auto& s : shards) {
      auto& st = streams_[s.range().id];
      anchor(s.values(), st.values);
      anchor(s.momentum(), st.momentum);
      st.version = s.version();
    }
    anchor_due_ = false;
    since_anchor_ = 0;
    return replica_of(shards, momentum, 0);
  }
  ++since_anchor_;
  ReplicaMessage out;
  for (const auto& s : shards) {
    auto& st = streams_.at(s.range().id);
    const bool m = momentum && !s.momentum().empty();
    out.replica.shards.push_back(
        {s.range().id, s.version(), s.released_round(), m, /*change=*/true, st.version});
    out.frames.push_back(change(s.values(), st.values));
    if (m) out.frames.push_back(change(s.momentum(), st.momentum));
    st.version = s.version();
  }
  return out;
}

StandbyLink::StandbyLink(const ServerConfig& config, uint32_t region, wire::Context& context)
    : region_(config.regions.at(region)),
      every_rounds_(config.standby.every_rounds),
      heartbeat_(config.heartbeat),
      encoder_(config.standby.codec, config.standby.anchor_every) {
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

void StandbyLink::check(const wire::Reply& reply) {
  const auto* e = std::get_if<wire::Error>(&reply.header.body);
  if (e && e->code == ErrorCode::replaced)
    throw Replaced(
        fmt::format("server {}: its standby at {} serves its shards now ({}): this "
                    "server stops; restarted, it takes them back",
                    region_, endpoint_, e->message));
  if (!e) return;
  spdlog::warn(
      "server {}: its standby at {} refused a replica: {} ({}); the next one carries "
      "the values",
      region_, endpoint_, e->message, wire::error_code_name(e->code));
  encoder_.anchor_next();
  resend_ = true;  // at once, not at the next release: the standby holds nothing usable now
}

void StandbyLink::drain() {
  while (auto reply = client_->receive(std::chrono::milliseconds(0))) check(*reply);
}

std::optional<wire::Reply> StandbyLink::await(uint64_t id, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    auto reply = client_->receive(left);
    if (!reply) return std::nullopt;
    if (reply->header.request_id == id) return reply;
    check(*reply);
  }
}

std::optional<StandbyLink::TakenBack> StandbyLink::take_back(std::chrono::milliseconds wait) {
  const auto id = client_->send(wire::TakeBack{});
  if (!id) return std::nullopt;
  auto reply = await(*id, wait);
  if (!reply) {
    spdlog::warn("server {}: its standby at {} did not answer within {} ms: no shards taken back",
                 region_, endpoint_, wait.count());
    return std::nullopt;
  }
  if (auto* r = std::get_if<wire::Replica>(&reply->header.body))
    return TakenBack{*r, std::move(reply->payloads)};
  const auto* e = std::get_if<wire::Error>(&reply->header.body);
  spdlog::warn("server {}: its standby at {} refused to hand its shards back: {}", region_,
               endpoint_, e ? e->message : wire::body_name(reply->header.body));
  return std::nullopt;
}

void StandbyLink::pump(const std::vector<Shard>& shards, bool momentum, TimePoint now) {
  drain();
  const uint64_t released = released_of(shards);
  const bool due = released >= sent_round_ + every_rounds_ || resend_;
  if (!due && last_send_ && now - *last_send_ < heartbeat_) return;
  std::optional<uint64_t> id;
  if (due) {
    auto m = encoder_.next(shards, momentum);
    uint64_t bytes = 0;
    for (const auto& f : m.frames) bytes += f.size();
    id = client_->send(std::move(m.replica), std::move(m.frames));
    if (id) {
      resend_ = false;
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
  if (auto reply = await(*id, wait)) check(*reply);
}

}  // namespace geotrain::server
