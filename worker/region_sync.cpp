#include "worker/region_sync.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "compression/factory.hpp"
#include "compression/payload.hpp"
#include "core/error.hpp"

namespace geotrain::worker {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Replies of one server, by request id; throws when the server stays silent past `timeout`.
std::map<uint64_t, wire::Reply> collect(wire::Client& client, const std::string& region,
                                        const std::vector<uint64_t>& ids,
                                        std::chrono::milliseconds timeout, const char* what) {
  std::map<uint64_t, wire::Reply> replies;
  const auto deadline = Clock::now() + timeout;
  while (replies.size() < ids.size()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0)
      throw SystemError("wire", what, __FILE__, __LINE__,
                        fmt::format("server of region {} sent {} of {} replies within {} ms",
                                    region, replies.size(), ids.size(), timeout.count()));
    auto reply = client.receive(left);
    if (!reply) continue;
    const uint64_t id = reply->header.request_id;
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) continue;  // a reply we gave up on
    if (auto* e = std::get_if<wire::Error>(&reply->header.body))
      throw InputError(fmt::format("server of region {} refused {}: {} ({})", region, what,
                                   e->message, wire::error_code_name(e->code)));
    replies.emplace(id, std::move(*reply));
  }
  return replies;
}

template <typename T>
const T& body_as(const wire::Reply& r, const std::string& region) {
  const T* b = std::get_if<T>(&r.header.body);
  GT_REQUIRE(b != nullptr, "server of region {} answered with an unexpected {}", region,
             wire::body_name(r.header.body));
  return *b;
}

}  // namespace

RegionSync::RegionSync(const ParamTable& layout, SyncConfig config, zmq::context_t& context)
    : layout_(layout),
      config_(std::move(config)),
      critical_ef_(compression::make_codec(config_.critical_codec)),
      noncritical_ef_(compression::make_codec(config_.noncritical_codec)) {
  GT_REQUIRE(!config_.servers.empty(), "region {}: no servers to synchronise with", config_.region);
  for (const auto& s : config_.servers) {
    ServerLink link;
    link.region = s.region;
    link.client = std::make_unique<wire::Client>(wire::connect_dealer(context, s.endpoint));
    servers_.push_back(std::move(link));
  }
  base_.assign(layout_.total_elements(), 0.0f);
}

RegionSync::~RegionSync() = default;

void RegionSync::set_origin(ConstFloatSpan origin) {
  GT_REQUIRE(origin.size() == base_.size(), "region {}: origin has {} parameters, the table has {}",
             config_.region, origin.size(), base_.size());
  origin_.assign(origin.begin(), origin.end());
}

void RegionSync::build_segments(ShardState& shard) const {
  // Runs of tensors of one class inside [offset, offset + count): one segment each.
  const uint64_t begin = shard.offset, end = shard.offset + shard.count;
  for (const auto& t : layout_.tensors()) {
    const uint64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.size);
    if (lo >= hi) continue;
    if (!shard.segments.empty() && shard.segments.back().critical == t.critical &&
        shard.offset + shard.segments.back().offset + shard.segments.back().count == lo) {
      shard.segments.back().count += hi - lo;
    } else {
      shard.segments.push_back({lo - begin, hi - lo, t.critical, 0});
    }
  }
  for (size_t i = 0; i < shard.segments.size(); ++i)
    shard.segments[i].stream = (uint64_t{shard.id} << 16) | i;
}

uint64_t RegionSync::connect() {
  shards_.clear();
  uint64_t next = UINT64_MAX;
  for (size_t s = 0; s < servers_.size(); ++s) {
    auto& link = servers_[s];
    auto id = link.client->send(
        wire::Hello{config_.region, wire::kProtocolVersion, layout_.layout_hash(), {}});
    GT_REQUIRE(id.has_value(), "server of region {}: send queue full", link.region);
    auto replies = collect(*link.client, link.region, {*id}, config_.timeout, "hello");
    const auto& hello = body_as<wire::HelloReply>(replies.begin()->second, link.region);
    link.last_contact = Clock::now();
    next = std::min(next, hello.next_round);
    for (const auto& info : hello.shards) {
      GT_REQUIRE(info.offset + info.count <= base_.size(),
                 "server of region {}: shard {} [{}, {}) lies outside the {} parameters",
                 link.region, info.id, info.offset, info.offset + info.count, base_.size());
      ShardState shard{info.id, info.offset, info.count, s, 0, {}};
      build_segments(shard);
      shards_.push_back(std::move(shard));
    }
  }
  uint64_t covered = 0;
  for (const auto& sh : shards_) covered += sh.count;
  GT_REQUIRE(covered == base_.size(), "region {}: the servers' shards cover {} of {} parameters",
             config_.region, covered, base_.size());
  round_ = next == UINT64_MAX ? 1 : next;
  pull_into_base(true, 0, nullptr);
  spdlog::info("region {}: connected to {} servers, {} shards, next round {}", config_.region,
               servers_.size(), shards_.size(), round_);
  return round_;
}

RegionSync::Pulls RegionSync::send_pulls(bool full, uint64_t min_round,
                                         const std::vector<bool>& servers) {
  Pulls pulls;
  pulls.ids.resize(servers_.size());
  pulls.shard_of.resize(servers_.size());
  for (size_t i = 0; i < shards_.size(); ++i) {
    auto& sh = shards_[i];
    if (!servers[sh.server]) continue;
    auto& link = servers_[sh.server];
    auto id = link.client->send(wire::PullRequest{sh.id, full ? 0 : sh.version, full, min_round});
    GT_REQUIRE(id.has_value(), "server of region {}: send queue full", link.region);
    pulls.ids[sh.server].push_back(*id);
    pulls.shard_of[sh.server][*id] = i;
  }
  return pulls;
}

void RegionSync::apply_pull(size_t shard_index, const wire::Reply& reply, RoundReport* report,
                            uint64_t& released) {
  auto& sh = shards_[shard_index];
  const auto& region = servers_[sh.server].region;
  const auto& pr = body_as<wire::PullReply>(reply, region);
  wire::check_frames(pr.segments, reply.payloads, reply.header.request_id);
  // Decode everything before changing base: a bad payload leaves base as it was.
  std::vector<std::vector<float>> decoded;
  for (size_t k = 0; k < pr.segments.size(); ++k) {
    const auto& seg = pr.segments[k];
    GT_REQUIRE(seg.offset + seg.count <= sh.count,
               "pull reply for shard {}: segment [{}, {}) outside the shard", sh.id, seg.offset,
               seg.offset + seg.count);
    decoded.emplace_back(seg.count);
    compression::decode_payload(wire::frame_bytes(reply.payloads[k]), decoded.back());
    if (report) report->bytes_pulled += reply.payloads[k].size();
  }
  float* base = base_.data() + sh.offset;
  for (size_t k = 0; k < pr.segments.size(); ++k) {
    const auto& seg = pr.segments[k];
    const auto& d = decoded[k];
    if (pr.full && origin_.empty()) {
      std::copy(d.begin(), d.end(), base + seg.offset);
    } else if (pr.full) {
      const float* o = origin_.data() + sh.offset + seg.offset;
      for (size_t j = 0; j < d.size(); ++j) base[seg.offset + j] = o[j] + d[j];
    } else {
      for (size_t j = 0; j < d.size(); ++j) base[seg.offset + j] += d[j];
    }
  }
  sh.version = pr.version;
  released = std::min(released, pr.round);
}

void RegionSync::pull_into_base(bool full, uint64_t min_round, RoundReport* report) {
  const auto t0 = Clock::now();
  Pulls pulls = send_pulls(full, min_round, std::vector<bool>(servers_.size(), true));
  uint64_t released = UINT64_MAX;
  for (size_t s = 0; s < servers_.size(); ++s) {
    if (pulls.ids[s].empty()) continue;
    auto replies =
        collect(*servers_[s].client, servers_[s].region, pulls.ids[s], config_.timeout, "pull");
    servers_[s].last_contact = Clock::now();
    for (auto& [id, reply] : replies) apply_pull(pulls.shard_of[s].at(id), reply, report, released);
  }
  if (report) {
    report->pull_seconds = seconds_since(t0);
    report->released_round = released == UINT64_MAX ? 0 : released;
  }
}

RoundReport RegionSync::exchange(ConstFloatSpan local) {
  GT_REQUIRE(local.size() == base_.size(), "region {}: {} local parameters, the table has {}",
             config_.region, local.size(), base_.size());
  GT_ASSERT(!shards_.empty(), "exchange() before connect()");
  RoundReport report;
  report.round = round_;
  delta_.resize(base_.size());
  for (size_t i = 0; i < base_.size(); ++i) delta_[i] = local[i] - base_[i];

  std::vector<std::vector<uint64_t>> push_ids(servers_.size());
  std::vector<size_t> shards_on(servers_.size(), 0);
  const auto t0 = Clock::now();
  for (const auto& sh : shards_) {
    wire::Push push{sh.id, round_, sh.version, {}};
    std::vector<zmq::message_t> frames;
    for (const auto& seg : sh.segments) {
      Bytes payload;
      auto& ef = seg.critical ? critical_ef_ : noncritical_ef_;
      ef.encode(seg.stream, ConstFloatSpan(delta_).subspan(sh.offset + seg.offset, seg.count),
                payload);
      const auto codec = static_cast<uint8_t>(compression::parse_header(payload).codec);
      push.segments.push_back({seg.offset, seg.count, codec, payload.size()});
      report.bytes_pushed += payload.size();
      frames.push_back(wire::frame_from_bytes(std::move(payload)));
    }
    auto& link = servers_[sh.server];
    auto id = link.client->send(std::move(push), std::move(frames));
    GT_REQUIRE(id.has_value(), "server of region {}: send queue full", link.region);
    push_ids[sh.server].push_back(*id);
    ++shards_on[sh.server];
  }

  // The pulls go right behind the pushes, on the same connection (so the server sees each push
  // before its pull), saving a WAN round trip per round: a pull may name the round being pushed
  // and waits at the server until it is released. A server holds at most 4 waiting requests per
  // peer, so this is done where a server has at most 2 of our shards (push + pull each).
  const uint64_t min_round =
      round_ > config_.staleness_bound ? round_ - config_.staleness_bound : 0;
  std::vector<bool> pipelined(servers_.size()), later(servers_.size());
  for (size_t s = 0; s < servers_.size(); ++s) {
    pipelined[s] = shards_on[s] > 0 && shards_on[s] <= kMaxPipelinedShards;
    later[s] = shards_on[s] > kMaxPipelinedShards;
  }
  Pulls early = send_pulls(false, min_round, pipelined);

  uint64_t released = UINT64_MAX;
  for (size_t s = 0; s < servers_.size(); ++s) {
    if (push_ids[s].empty()) continue;
    std::vector<uint64_t> ids = push_ids[s];
    ids.insert(ids.end(), early.ids[s].begin(), early.ids[s].end());
    auto replies =
        collect(*servers_[s].client, servers_[s].region, ids, config_.timeout, "push and pull");
    servers_[s].last_contact = Clock::now();
    for (uint64_t id : push_ids[s]) {
      const auto& pr = body_as<wire::PushReply>(replies.at(id), servers_[s].region);
      report.max_staleness = std::max(report.max_staleness, pr.staleness);
      report.gate_wait_us = std::max(report.gate_wait_us, pr.gate_wait_us);
    }
    for (uint64_t id : early.ids[s])
      apply_pull(early.shard_of[s].at(id), replies.at(id), &report, released);
  }
  report.push_seconds = seconds_since(t0);

  // Servers holding more of our shards: pull once their pushes are in.
  const auto t1 = Clock::now();
  Pulls rest = send_pulls(false, min_round, later);
  for (size_t s = 0; s < servers_.size(); ++s) {
    if (rest.ids[s].empty()) continue;
    auto replies =
        collect(*servers_[s].client, servers_[s].region, rest.ids[s], config_.timeout, "pull");
    servers_[s].last_contact = Clock::now();
    for (auto& [id, reply] : replies) apply_pull(rest.shard_of[s].at(id), reply, &report, released);
  }
  report.pull_seconds = seconds_since(t1);
  report.released_round = released == UINT64_MAX ? 0 : released;
  ++round_;
  return report;
}

void RegionSync::keep_alive() {
  const auto now = Clock::now();
  for (auto& link : servers_) {
    if (now - link.last_contact < config_.heartbeat) continue;
    auto id = link.client->send(wire::Heartbeat{});
    if (!id) continue;  // queue full: the server is behind, and will hear from us soon anyway
    collect(*link.client, link.region, {*id}, config_.timeout, "heartbeat");
    link.last_contact = Clock::now();
  }
}

}  // namespace geotrain::worker
