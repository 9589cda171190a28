#include "server/param_server.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "compression/codec.hpp"
#include "compression/payload.hpp"
#include "core/endpoint.hpp"
#include "core/error.hpp"
#include "server/prometheus_text.hpp"
#include "server/shard_kernels.hpp"

namespace geotrain::server {

using wire::ErrorCode;
using wire::WireError;

namespace {
template <class... F>
struct Overload : F... {
  using F::operator()...;
};
template <class... F>
Overload(F...) -> Overload<F...>;  // for clang < 17 (fuzz/'s libFuzzer build): no aggregate CTAD

std::filesystem::path under(const std::filesystem::path& base, const std::filesystem::path& p) {
  return p.is_absolute() ? p : base / p;
}

// options.endpoint (`geotrain server --endpoint`), else server.endpoints[region]; InputError when
// neither names a valid endpoint.
std::string listen_endpoint(const ServerConfig& config, uint32_t region,
                            const ServerOptions& options) {
  GT_REQUIRE(region < config.regions.size(),
             "server region index {} is outside the {} configured regions", region,
             config.regions.size());
  if (options.endpoint) {
    require_endpoint(*options.endpoint, "the server's listen endpoint (--endpoint)");
    return *options.endpoint;
  }
  if (options.standby) {
    const auto it = config.standby.endpoints.find(config.regions[region]);
    GT_REQUIRE(it != config.standby.endpoints.end(),
               "server.standby.endpoints has no entry for region '{}' (where the standby of its "
               "shards listens)",
               config.regions[region]);
    return it->second;
  }
  const auto it = config.endpoints.find(config.regions[region]);
  GT_REQUIRE(it != config.endpoints.end(),
             "server.endpoints has no entry for region '{}' (where its server listens; or give "
             "--endpoint)",
             config.regions[region]);
  return it->second;  // checked when the config was read
}

}  // namespace

ParamServer::ParamServer(const ServerConfig& config, uint32_t region, wire::Context& context,
                         ServerOptions options)
    : config_(config),
      region_(region),
      options_(std::move(options)),
      listen_at_(listen_endpoint(config, region, options_)),
      table_(config.tensors, config.critical),
      map_(table_.total_elements(),
           config.shards_per_region.empty() ? std::vector<uint32_t>(config.regions.size(), 1)
                                            : config.shards_per_region,
           config.chunk, config.fragments,
           config.stream_critical ? std::vector<ElementRange>{} : table_.critical_ranges()),
      membership_(config.regions, config.dead_after, config.wait_for_all_regions, options_.clock(),
                  config.join_within),
      // A standby's own: what it writes once it serves must not mix with its primary's.
      checkpoints_(under(config.run_dir, config.checkpoint.dir) /
                       (config.regions.at(region) + (options_.standby ? "-standby" : "")),
                   config.checkpoint.keep),
      metrics_(
          config.regions, config.shard.staleness_bound,
          options_.write_metrics
              ? std::optional(config.run_dir / fmt::format("{}-{}.metrics.jsonl",
                                                           options_.standby ? "standby" : "server",
                                                           config.regions.at(region)))
              : std::nullopt),
      serving_(!options_.standby),
      primary_heard_(options_.clock()) {
  // A leader keeps a push and its pull waiting for each of our shards.
  parked_ = ParkedRequests(wire::max_waiting_per_peer(map_.owned_by(region).size()));
  for (const auto& range : map_.owned_by(region)) {
    std::vector<compression::SpanPiece> pieces;  // for a downlink that factorises matrices
    for (const auto& p : table_.pieces(range.offset, range.offset + range.count))
      pieces.push_back({p.count, {p.rows(), p.cols}});
    shards_.emplace_back(range, table_.critical_mask(range.offset, range.offset + range.count),
                         config.regions.size(), config.shard, std::move(pieces));
  }
  // A helper thread only where some shard is large enough to split its passes.
  if (std::any_of(shards_.begin(), shards_.end(),
                  [](const Shard& s) { return s.range().count >= kSplitElements; })) {
    splitter_ = std::make_unique<PassSplitter>();
    for (auto& s : shards_) s.set_splitter(splitter_.get());
  }
  wire::ChannelOptions channel;
  channel.send_hwm = channel.receive_hwm = config.high_water_mark;
  channel.max_frame_bytes = config.max_message_bytes;
  channel.max_frames = kMaxSegments + 1;
  channel.handshake_ms = static_cast<int>(config.handshake.count());
  channel.socket_buffer_bytes = static_cast<int>(config.socket_buffer_kib) * 1024;
  if (config.socket_buffer_kib > 0) {
    const auto b = wire::effective_socket_buffer(channel.socket_buffer_bytes);
    spdlog::info(
        "server {}: socket buffers {} KiB asked, the kernel grants {} KiB to send and "
        "{} KiB to receive (net.core.wmem_max {}, rmem_max {})",
        config.regions[region], config.socket_buffer_kib, b.send_bytes / 1024,
        b.receive_bytes / 1024, b.send_max, b.receive_max);
  }
  admission_ = admit_clients(config, region, context, options_.authenticator, channel);
  if (config.standby.on && !options_.standby)
    standby_link_ = std::make_unique<StandbyLink>(config, region, context);
  // Restored before the port opens: once it accepts connections (what `geotrain run` waits for
  // after a restart), the checkpoint is in and its `restore` event written.
  restore();
  channel_ = wire::bind_router(context, listen_at_, channel);
  if (auto m = config.metrics_ports.find(config.regions[region]); m != config.metrics_ports.end()) {
    metrics_endpoint_ =
        std::make_unique<wire::MetricsEndpoint>(context, config.metrics_host, m->second);
    spdlog::info("server {}: Prometheus metrics at {}", config.regions[region],
                 metrics_endpoint_->url());
    metrics_.event("metrics_endpoint",
                   {{"port", metrics_endpoint_->port()}, {"url", metrics_endpoint_->url()}});
  }
  spdlog::info("{} {}: {} shard(s) of {} elements, {}, {} on {}{}",
               options_.standby ? "standby of region" : "server", config.regions[region],
               shards_.size(), table_.total_elements(), config.shard.optimizer.describe(),
               config.shard.consistency.describe(), channel_->endpoint(),
               admission_.curve
                   ? fmt::format(" (CURVE, keys from {})", config.security.keys_dir.string())
                   : std::string());
}

void ParamServer::run(std::stop_token stop) {
  auto last_snapshot = options_.clock();
  while (!stop.stop_requested() && step(options_.poll)) {
    if (options_.clock() - last_snapshot >= config_.metrics_every) {
      metrics_.event("stats", stats());
      last_snapshot = options_.clock();
    }
  }
  metrics_.event("stats", stats());
}

bool ParamServer::step(std::chrono::milliseconds timeout) {
  // Quorum policy: wake up when a round's grace window expires, not a poll tick later.
  std::optional<TimePoint> deadline;
  for (const auto& s : shards_)
    if (auto d = s.grace_deadline(); d && (!deadline || *d < *deadline)) deadline = d;
  if (deadline) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - options_.clock());
    timeout = std::clamp(left, std::chrono::milliseconds(0), timeout);
  }
  const auto waited_from = std::chrono::steady_clock::now();
  auto env = channel_->receive(timeout);
  excuse_own_stall(waited_from, timeout, "did not run");
  // Parked requests are retried only when something they may wait for can have changed: a
  // message applied, a region declared dead, a quorum's grace window. Not after a refusal or
  // another parked request, so that peers filling the parked list do not make every message
  // they send cost a pass over it.
  bool changed = false;
  if (env) {
    const Outcome outcome = handle(*env, std::nullopt);
    changed = outcome == Outcome::done;
    if (outcome == Outcome::park) {
      const auto peer = env->peer;
      const auto busy = parked_.park(std::move(*env), options_.clock(), [&](const std::string& p) {
        return membership_.region_of(p).has_value();
      });
      if (busy) reply_error(peer, 0, ErrorCode::busy, *busy);
    }
  }
  // This message's work (a round's release, the downlink's encoding: seconds for a large model
  // on a busy machine) is time in which the server read nobody's messages either: excused before
  // the sweep weighs the regions' silence, not at the next tick, after it has marked them dead.
  excuse_own_stall(std::chrono::steady_clock::now(), std::chrono::milliseconds(0),
                   "was busy with one message");
  changed = sweep() || changed || std::exchange(sat_out_, false);
  if (config_.shard.consistency.is_quorum()) {
    release_rounds();  // grace windows that expired
    changed = true;
  }
  if (changed) retry_parked();
  if (metrics_endpoint_)
    metrics_endpoint_->serve([&] { return prometheus_text(stats(), wire::read_process_stats()); });
  if (standby_link_)
    standby_link_->pump(shards_, config_.shard.optimizer.momentum != 0.0f, options_.clock());
  return !shutdown_;
}

ParamServer::Outcome ParamServer::handle(wire::Envelope& env,
                                         std::optional<TimePoint> parked_since) {
  uint64_t request_id = 0;
  try {
    // The channel kept at most kMaxSegments + 2 frames of the message (the rest were dropped as
    // they arrived); the header is read first so that a refusal by count names the request.
    const wire::Header h = wire::decode_header(env.frames.front());
    request_id = h.request_id;
    // The key-value exchange is open to every peer and a KvGet may wait (parked, frames and
    // all): its frame 0 is held to what a key and a value need, not kMaxHeaderWords.
    const bool kv = RendezvousStore::handles(h.body);
    if (kv && env.frames.front().size() > kMaxKvFrameBytes)
      throw WireError(ErrorCode::too_large,
                      fmt::format("{} header of {} bytes, limit {}", wire::body_name(h.body),
                                  env.frames.front().size(), kMaxKvFrameBytes),
                      request_id);
    if (env.frames.size() > kMaxSegments + 1)
      throw WireError(ErrorCode::too_large,
                      fmt::format("message has more than {} frames", kMaxSegments + 1), request_id);
    uint64_t total = 0;
    for (const auto& f : env.frames) total += f.size();
    if (total > static_cast<uint64_t>(config_.max_message_bytes))
      throw WireError(
          ErrorCode::too_large,
          fmt::format("message has {} bytes, limit is {}", total, config_.max_message_bytes),
          request_id);
    return dispatch(env.peer, h, std::span<const wire::Frame>(env.frames).subspan(1), parked_since);
  } catch (const WireError& e) {
    reply_error(env.peer, e.request_id() ? e.request_id() : request_id, e.code(), e.what());
  } catch (const InputError& e) {
    reply_error(env.peer, request_id, ErrorCode::bad_payload, e.what());
  }
  return Outcome::refused;
}

ParamServer::Outcome ParamServer::dispatch(const std::string& peer, const wire::Header& h,
                                           std::span<const wire::Frame> payloads,
                                           std::optional<TimePoint> parked_since) {
  if (auto* hello = std::get_if<wire::Hello>(&h.body)) {
    if (!serving_ && !take_over(h)) return Outcome::refused;
    on_hello(peer, h, *hello);
    return Outcome::done;
  }
  // Standby shards: the primary is no region's peer (server/standby.hpp).
  if (auto* replica = std::get_if<wire::Replica>(&h.body))
    return on_replica(peer, h, *replica, payloads);
  if (std::holds_alternative<wire::TakeBack>(h.body)) return on_take_back(peer, h);
  // The key-value exchange is open to every peer (server/rendezvous_store.hpp).
  if (auto* set = std::get_if<wire::KvSet>(&h.body)) {
    kv_.set(*set, payloads, h.request_id);
    reply(peer, h.request_id, wire::Ack{});
    return Outcome::done;
  }
  if (auto* get = std::get_if<wire::KvGet>(&h.body)) {
    auto value = kv_.get(*get, payloads, h.request_id);
    if (!value) return Outcome::park;  // rendezvous: wait until someone sets it
    reply(peer, h.request_id, wire::KvReply{get->key, std::move(*value)});
    return Outcome::done;
  }
  if (auto* get = std::get_if<wire::KvTryGet>(&h.body)) {
    auto value = kv_.get(*get, payloads, h.request_id);
    if (value)
      reply(peer, h.request_id, wire::KvReply{get->key, std::move(*value)});
    else
      reply(peer, h.request_id, wire::Ack{});  // not set: the asker does not wait
    return Outcome::answered;                  // nothing changed: no retry of parked requests
  }
  const auto region = membership_.region_of(peer);
  if (!region)
    throw WireError(ErrorCode::unregistered,
                    fmt::format("{} from a peer that is not registered: send hello first",
                                wire::body_name(h.body)),
                    h.request_id);
  const uint32_t r = *region;
  membership_.seen(r, options_.clock());
  if (!std::holds_alternative<wire::Push>(h.body) &&
      !std::holds_alternative<wire::PullRequest>(h.body) && !payloads.empty())
    throw WireError(ErrorCode::malformed,
                    fmt::format("{} carries {} payload frames, expected none",
                                wire::body_name(h.body), payloads.size()),
                    h.request_id);
  return std::visit(
      Overload{
          [&](const wire::Push& m) { return on_push(r, h, m, payloads, parked_since); },
          [&](const wire::PullRequest& m) {
            if (!payloads.empty())
              throw WireError(ErrorCode::malformed, "pull carries payload frames, expected none",
                              h.request_id);
            return on_pull(r, h, m);
          },
          [&](const wire::Heartbeat&) {
            // What it was answered last: a reply it awaits and never got was lost on the way.
            reply(peer, h.request_id, wire::HeartbeatReply{answered_.recent(peer)});
            return Outcome::done;
          },
          [&](const wire::StatsRequest&) {
            reply(peer, h.request_id, wire::StatsReply{stats().dump()});
            return Outcome::done;
          },
          [&](const wire::CheckpointRequest&) {
            reply(peer, h.request_id, wire::CheckpointReply{checkpoint()});
            return Outcome::done;
          },
          [&](const wire::Goodbye&) {
            const auto left = membership_.leave(r);
            forget_parked(peer, fmt::format("region {} said goodbye", config_.regions[r]));
            spdlog::info("membership: region {} left ({})", config_.regions[r], left.why);
            metrics_.event("membership", {{"region", config_.regions[r]}, {"change", "left"}});
            reply(peer, h.request_id, wire::Ack{});
            release_rounds();  // rounds that waited only for it
            return Outcome::done;
          },
          [&](const wire::Shutdown&) {
            spdlog::info("shutdown requested by region {}", config_.regions[r]);
            shutdown_ = true;
            reply(peer, h.request_id, wire::Ack{});
            return Outcome::done;
          },
          [&](const auto&) -> Outcome {
            throw WireError(ErrorCode::malformed,
                            fmt::format("'{}' is a reply, not a request", wire::body_name(h.body)),
                            h.request_id);
          },
      },
      h.body);
}

Shard& ParamServer::shard_for(uint32_t id, uint64_t request_id) {
  for (auto& s : shards_)
    if (s.range().id == id) return s;
  std::string owned;
  for (const auto& s : shards_) owned += (owned.empty() ? "" : ", ") + std::to_string(s.range().id);
  throw WireError(ErrorCode::bad_shard,
                  fmt::format("shard {} is not owned by this server (it owns: {})", id, owned),
                  request_id);
}

ParamServer::Outcome ParamServer::on_push(uint32_t r, const wire::Header& h, const wire::Push& m,
                                          std::span<const wire::Frame> payloads,
                                          std::optional<TimePoint> parked_since) {
  const uint64_t id = h.request_id;
  Shard& shard = shard_for(m.shard, id);
  if (m.absent) return on_absent(r, h, m, shard);
  const uint64_t next = shard.gate().clock(r) + 1;
  if (m.round != next && !(m.skip && m.round > next))
    throw WireError(ErrorCode::bad_round,
                    fmt::format("push.round is {}, region {} must push round {} next{}", m.round,
                                config_.regions[r], next, m.skip ? " or a later one" : ""),
                    id);
  if (m.round > next && m.round - next > kMaxRoundsSatOut)
    throw WireError(ErrorCode::bad_round,
                    fmt::format("push.round is {}: region {} would sit out {} rounds, at most {}",
                                m.round, config_.regions[r], m.round - next, kMaxRoundsSatOut),
                    id);
  if (m.base_version > shard.version())
    throw WireError(ErrorCode::bad_round,
                    fmt::format("push.baseVersion {} is newer than shard {} version {}",
                                m.base_version, m.shard, shard.version()),
                    id);
  const uint64_t n = shard.range().count;
  PushPayload::check(m, payloads, n, id);
  // The end of a run: not a round, and not gated (server/param_server_flush.cpp).
  if (m.flush) return on_flush(r, h, m, payloads);
  if (shard.flushed(r))
    throw WireError(ErrorCode::bad_round,
                    fmt::format("region {} flushed shard {}: it pushes no more rounds",
                                config_.regions[r], m.shard),
                    id);
  // A push that skips rounds sits them out now, whatever the gate then says of the push itself:
  // the region holds none of them back from here on (docs/protocol.md, "Sitting out rounds").
  if (m.round > next) {
    metrics_.region(r).rounds_sat_out += shard.sit_out(r, m.round - 1);
    release_rounds();
    sat_out_ = true;  // step(): parked requests may go on now
  }
  // Everything about the header holds; now the gate decides whether this push may proceed.
  const auto live_now = in_rounds(shard, live());
  if (!shard.admits(m.round, live_now)) return Outcome::park;

  // The delta: in place where it can be (server/push_payload.hpp), so that the shard starts
  // computing from it (Shard::start_push) while this thread checks it.
  const auto delta = push_payload_.read(m, payloads, n, id);
  // From here until commit() (or a throw, which drops it) the shard computes its next version.
  auto staged = shard.start_push(r, m.round, delta.values, live_now, {m.tokens, options_.clock()});
  if (!PushPayload::finite(delta, payloads, id))
    throw WireError(ErrorCode::bad_payload, "push delta contains NaN or infinity", id);

  // Checked: the push is accepted. Reply first and commit right after. This loop commits it
  // before it reads another message, so no peer can tell the difference, and whatever is left
  // of the step runs while the reply is on its way rather than before it sets out. (The payload
  // frame is read after the reply has gone: like any ZeroMQ frame, it must stay valid until
  // ZeroMQ frees it.)
  const auto result = staged.result();
  auto& c = metrics_.region(r);
  ++c.pushes;
  for (const auto& f : payloads) c.bytes_in += f.size();
  metrics_.record_staleness(r, result.staleness);
  uint64_t waited_us = 0;
  if (parked_since) {
    waited_us = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(options_.clock() - *parked_since)
            .count());
    ++c.gate_waits;
    c.gate_wait_us += waited_us;
  }
  reply(membership_.peer(r).value_or(std::string()), id,
        wire::PushReply{m.shard, m.round, result.staleness, waited_us,
                        longest_silence_ms(shard.holding_back(m.round, live_now, r))});
  staged.commit();
  release_rounds();
  return Outcome::done;
}

ParamServer::Outcome ParamServer::on_absent(uint32_t r, const wire::Header& h, const wire::Push& m,
                                            Shard& shard) {
  const uint64_t id = h.request_id;
  if (!m.segments.empty() || m.flush)
    throw WireError(ErrorCode::malformed,
                    fmt::format("push.absent with {}: an absent push carries no delta",
                                m.flush ? "flush" : fmt::format("{} segments", m.segments.size())),
                    id);
  if (shard.flushed(r))
    throw WireError(ErrorCode::bad_round,
                    fmt::format("region {} flushed shard {}: it sits out no more rounds",
                                config_.regions[r], m.shard),
                    id);
  const uint64_t clock = shard.gate().clock(r);
  if (m.round > clock && m.round - clock > kMaxRoundsSatOut)
    throw WireError(ErrorCode::bad_round,
                    fmt::format("push.round is {}: region {} would sit out {} rounds, at most {}",
                                m.round, config_.regions[r], m.round - clock, kMaxRoundsSatOut),
                    id);
  // Rounds it pushed or sat out already stay as they are (a skipping push may have overtaken it).
  if (m.round > clock) {
    metrics_.region(r).rounds_sat_out += shard.sit_out(r, m.round);
    release_rounds();
    sat_out_ = true;  // step(): parked requests may go on now
  }
  reply(membership_.peer(r).value_or(std::string()), id, wire::PushReply{m.shard, m.round, 0, 0});
  return Outcome::done;
}

ParamServer::Outcome ParamServer::on_pull(uint32_t r, const wire::Header& h,
                                          const wire::PullRequest& m) {
  const uint64_t id = h.request_id;
  Shard& shard = shard_for(m.shard, id);
  // A pull may wait for the round its region is pushing right now (clock + 1): a leader sends
  // its pull right behind its push, saving a WAN round trip, and the push may be waiting at the
  // gate. Such a pull waits (below) until that push is applied and the round released.
  if (m.min_round > shard.gate().clock(r) + 1)
    throw WireError(ErrorCode::bad_round,
                    fmt::format("pull.minRound is {} but region {} pushed only up to round {} (a "
                                "pull may wait for the next round, {}, at most)",
                                m.min_round, config_.regions[r], shard.gate().clock(r),
                                shard.gate().clock(r) + 1),
                    id);
  if (!m.full) {
    if (!shard.has_downlink(r))
      throw WireError(
          ErrorCode::bad_round,
          fmt::format("region {} has no values of shard {} yet: pull with full=true first",
                      config_.regions[r], m.shard),
          id);
    if (m.since_version != shard.sent_version(r))
      throw WireError(
          ErrorCode::bad_round,
          fmt::format(
              "pull.sinceVersion is {}, the server last sent version {}: pull with full=true",
              m.since_version, shard.sent_version(r)),
          id);
  }
  if (m.after_flush) {
    check_final_pull(r, shard, m, id);
    if (!shard.flush_released()) return Outcome::park;
  }
  if (shard.released_round() < m.min_round) return Outcome::park;
  // The values themselves (shared, no copy: server/value_buffer.hpp), or a change encoded into a
  // pooled buffer.
  const bool values = shard.pull_sends_values(r, m.full);
  std::vector<wire::Frame> frames;
  if (values) {
    frames.push_back(ValueBufferPool::frame(shard.pull_values(r)));
  } else {
    Bytes payload = pool_.acquire(shard.change_bytes(r));
    shard.pull_change(r, payload);
    frames.push_back(pool_.frame(std::move(payload)));
  }
  const uint64_t bytes = frames.back().size();
  // One segment over the whole shard: its payload's header says the codec and the count.
  wire::PullReply out{m.shard, shard.version(), shard.released_round(),
                      values,  {{0, bytes}},    shard.frontier(in_rounds(shard, live()))};
  auto& c = metrics_.region(r);
  ++c.pulls;
  c.bytes_out += bytes;
  reply(membership_.peer(r).value_or(std::string()), id, std::move(out), std::move(frames));
  return Outcome::done;
}

void ParamServer::release_rounds() {
  const auto live_now = live();
  const auto now = options_.clock();
  for (auto& s : shards_)
    for (const auto& rel : s.release_ready(in_rounds(s, live_now), now))
      metrics_.round_released(s.range().id, rel.round, rel.contributors, rel.late);
  release_flushes(live_now);
  if (config_.checkpoint.every == 0 || shards_.empty()) return;
  uint64_t round = UINT64_MAX;
  for (const auto& s : shards_) round = std::min(round, s.released_round());
  if (round >= last_checkpoint_round_ + config_.checkpoint.every) checkpoint();
}

void ParamServer::retry_parked() {
  parked_.retry(
      [&](ParkedRequests::Request& p) { return handle(p.envelope, p.since) != Outcome::park; });
}

nlohmann::json ParamServer::stats() const {
  auto j = metrics_.snapshot();
  j["server"] = config_.regions[region_];
  j["parked"] = parked_.size();
  nlohmann::json shards = nlohmann::json::array();
  for (const auto& s : shards_)
    shards.push_back({{"id", s.range().id},
                      {"version", s.version()},
                      {"released_round", s.released_round()},
                      {"clocks", s.gate().clocks()}});
  j["shards"] = shards;
  if (options_.standby)
    j["standby"] = {{"role", serving_ ? "serving" : "standby"},
                    {"has_replica", has_replica_},
                    {"takeovers", takeovers_}};
  else if (standby_link_)
    j["standby"] = {{"role", "primary"},
                    {"endpoint", standby_link_->endpoint()},
                    {"replicas_sent", standby_link_->replicas_sent()},
                    {"replica_bytes", standby_link_->bytes_sent()}};
  if (const auto* authenticator = admission_.authenticator) {
    const auto a = authenticator->counts();
    if (authenticator->policy().curve)
      j["curve"] = {{"accepted", a.accepted},
                    {"refused_key", a.refused_key},
                    {"failed_handshakes", a.failed_handshakes},
                    {"connections_open", a.connections_open}};
    j["connections"] = {{"open", a.connections_open},
                        {"refused_over_cap", a.refused_cap},
                        {"max_per_address", authenticator->policy().max_connections_per_address}};
  }
  const auto counted = membership_.live();
  for (uint32_t r = 0; r < counted.size(); ++r) {
    j["regions"][config_.regions[r]]["live"] = static_cast<bool>(counted[r]);
    j["regions"][config_.regions[r]]["registered"] = membership_.registered(r);
  }
  return j;
}

void ParamServer::reply(const std::string& peer, uint64_t request_id, wire::Body body,
                        std::vector<wire::Frame> payloads) {
  if (peer.empty()) return;
  wire::Envelope env{peer, {}};
  env.frames.push_back(wire::encode_header(wire::Header{request_id, std::move(body)}));
  for (auto& p : payloads) env.frames.push_back(std::move(p));
  if (!channel_->send(std::move(env)))
    spdlog::warn("reply to a peer dropped: it is gone or not reading");
  else if (membership_.region_of(peer))
    answered_.record(peer, request_id);
}

void ParamServer::reply_error(const std::string& peer, uint64_t request_id, ErrorCode code,
                              const std::string& message) {
  if (auto r = membership_.region_of(peer)) ++metrics_.region(*r).errors;
  // A peer of another release is a deployment mistake the operator must see; the rest is routine.
  if (code == ErrorCode::bad_version)
    spdlog::warn("refused a peer of another protocol version: {}", message);
  else
    spdlog::debug("error reply ({}): {}", wire::error_code_name(code), message);
  reply(peer, request_id, wire::Error{code, message});
}

}  // namespace geotrain::server
