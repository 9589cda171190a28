#include "worker/leader/shard.hpp"

#include <algorithm>

#include "compression/payload.hpp"
#include "core/values_hash.hpp"
#include "worker/leader/reply_wait.hpp"
#include "worker/leader/uplink.hpp"

namespace geotrain::worker {

namespace {
// The hash of a full pull's values, its segments taken in the order of their offsets (they cover
// the shard: the server's values, which it hashes whole).
uint64_t values_hash_of(const wire::PullReply& pr, const std::vector<std::vector<float>>& decoded) {
  std::vector<size_t> order(pr.segments.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return pr.segments[a].offset < pr.segments[b].offset; });
  ValuesHasher hash;
  for (const size_t k : order) hash.add(decoded[k]);
  return hash.digest();
}
}  // namespace

const char* shard_phase_name(ShardPhase phase) {
  switch (phase) {
    case ShardPhase::idle:
      return "idle";
    case ShardPhase::pushing:
      return "pushing";
    case ShardPhase::pushed:
      return "pushed";
    case ShardPhase::pulling:
      return "pulling";
    case ShardPhase::needs_resync:
      return "needs_resync";
    case ShardPhase::deferred:
      return "deferred";
    case ShardPhase::deferred_lost:
      return "deferred_lost";
    case ShardPhase::merged:
      return "merged";
    case ShardPhase::flushing:
      return "flushing";
  }
  return "?";
}

LeaderShard::LeaderShard(const wire::ShardInfo& info, size_t server_index, const ParamTable& layout,
                         Segments cut, const std::string& region)
    : id(info.id),
      offset(info.offset),
      count(info.count),
      server(server_index),
      fragment(info.fragment),
      zero_start(info.zero_values),
      hello_next_round(info.next_round),
      flushed_before(info.flushed),
      flush_held(info.flushed) {
  const uint64_t total = layout.total_elements();
  // Written so that no sum overflows: offset + count could wrap past any bound.
  GT_REQUIRE(count <= total && offset <= total - count,
             "server of region {}: shard {} [{}, {}) lies outside the {} parameters", region, id,
             offset, offset + count, total);
  // The tensors' pieces inside [offset, offset + count), joined per class or per tensor unless
  // each piece is a segment of its own.
  size_t last_tensor = 0;
  for (const auto& piece : layout.pieces(offset, offset + count)) {
    auto* last = segments.empty() ? nullptr : &segments.back();
    const bool join = last && (cut == Segments::per_class    ? last->critical == piece.critical
                               : cut == Segments::per_tensor ? last_tensor == piece.tensor
                                                             : false);
    if (join) {
      last->count += piece.count;
      last->cols = 0;  // not one matrix's whole rows
    } else {
      segments.push_back({piece.offset, piece.count, piece.critical, 0, piece.cols});
    }
    last_tensor = piece.tensor;
  }
  GT_REQUIRE(segments.size() <= 0x10000,
             "shard {} has {} segments, at most 65536 (worker.chunk_align: tensor makes one per "
             "tensor)",
             id, segments.size());
  for (size_t i = 0; i < segments.size(); ++i) segments[i].stream = (uint64_t{id} << 16) | i;
}

void LeaderShard::bind(FloatSpan base_table, ConstFloatSpan origin_table, TensorMotion& motion) {
  base_ = base_table.subspan(offset, count);
  motion_ = &motion;
  origin_ = origin_table.empty() ? ConstFloatSpan{} : origin_table.subspan(offset, count);
}

void LeaderShard::start_from_origin() {
  if (origin_.empty())
    std::fill(base_.begin(), base_.end(), 0.0f);
  else
    std::copy(origin_.begin(), origin_.end(), base_.begin());
}

wire::Push LeaderShard::push_message(ConstFloatSpan local, Uplink& uplink, uint64_t round,
                                     uint64_t tokens, bool flush, std::vector<wire::Frame>& frames,
                                     uint64_t& bytes, uint32_t& segments_sent) const {
  // A round past the one its server expects next: the rounds between are sat out.
  wire::Push push{id, round, version, {}, tokens, flush, round > expects_next_};
  for (const auto& seg : segments) {
    const auto delta = uplink.delta(local.subspan(offset + seg.offset, seg.count),
                                    ConstFloatSpan(base_).subspan(seg.offset, seg.count));
    // The flush sends only the progress not pushed yet, in fp32: the uplink residual is
    // compression error still owed, which the final model leaves out (docs/training.md, "The end
    // of a run"), and a segment that owes nothing sends nothing.
    if (flush && std::all_of(delta.begin(), delta.end(), [](float v) { return v == 0.0f; }))
      continue;
    Bytes payload;
    if (flush)
      uplink.encode_fp32(delta, payload);
    else
      uplink.encode(seg.critical, seg.stream, delta, payload, seg.shape());
    push.segments.push_back({seg.offset, payload.size()});
    bytes += payload.size();
    ++segments_sent;
    frames.push_back(wire::frame_from_bytes(std::move(payload)));
  }
  return push;
}

bool LeaderShard::take(std::map<uint64_t, wire::Reply>& replies, const std::string& region,
                       ShardTally& tally) {
  bool took = false;
  if (push_id_) {
    if (auto it = replies.find(*push_id_); it != replies.end()) {
      const auto& pr = body_as<wire::PushReply>(it->second, region);
      tally.max_staleness = std::max(tally.max_staleness, pr.staleness);
      tally.gate_wait_us = std::max(tally.gate_wait_us, pr.gate_wait_us);
      awaited_silence_ = std::chrono::milliseconds(pr.awaited_silence_ms);
      replies.erase(it);
      push_answered();
      took = true;
    }
  }
  if (pull_id_) {
    if (auto it = replies.find(*pull_id_); it != replies.end()) {
      apply_pull(it->second, region, tally);
      replies.erase(it);
      took = true;
    }
  }
  return took;
}

void LeaderShard::apply_pull(const wire::Reply& reply, const std::string& region,
                             ShardTally& tally) {
  const auto& pr = body_as<wire::PullReply>(reply, region);
  wire::check_frames(pr.segments, reply.payloads, reply.header.request_id);
  // Decode everything before changing base: a bad payload leaves base as it was.
  std::vector<std::vector<float>> decoded;
  uint64_t bytes = 0;
  for (size_t k = 0; k < pr.segments.size(); ++k) {
    const auto& seg = pr.segments[k];
    const auto payload = wire::frame_bytes(reply.payloads[k]);
    const auto header = compression::parse_header(payload);
    // No sum that could wrap: a payload claiming 2^64 - 1 elements must not be allocated below.
    GT_REQUIRE(header.elements <= count && seg.offset <= count - header.elements,
               "pull reply for shard {}: segment [{}, {}) outside the shard", id, seg.offset,
               seg.offset + header.elements);
    decoded.emplace_back(header.elements);
    const auto d = compression::decode_view(header, payload, decoded.back());
    if (d.data() != decoded.back().data()) decoded.back().assign(d.begin(), d.end());
    bytes += payload.size();
  }
  // A round's pull (not a start's, a resync's or the flush's full pull) moves the tensor motion:
  // by its change, or by new - old where it sent the values (an fp32 downlink does).
  const bool round_pull = motion_ != nullptr && !full_;
  std::vector<float> change;
  for (size_t k = 0; k < pr.segments.size(); ++k) {
    const auto at = pr.segments[k].offset;
    const auto& d = decoded[k];
    float* b = base_.data() + at;
    if (!pr.full) {
      for (size_t j = 0; j < d.size(); ++j) b[j] += d[j];
      if (round_pull) motion_->add(offset + at, d, ConstFloatSpan(b, d.size()));
      continue;
    }
    if (round_pull) change.assign(b, b + d.size());
    if (origin_.empty()) {
      std::copy(d.begin(), d.end(), b);
    } else {
      const float* o = origin_.data() + at;
      for (size_t j = 0; j < d.size(); ++j) b[j] = o[j] + d[j];
    }
    if (round_pull) {
      for (size_t j = 0; j < d.size(); ++j) change[j] = b[j] - change[j];
      motion_->add(offset + at, change, ConstFloatSpan(b, d.size()));
    }
  }
  tally.bytes_pulled += bytes;
  frontier_ = pr.frontier;
  if (full_ == FullPull::resync) {
    // A rejoined server sends the full values, and its region clock restarts at its released
    // round. The round this exchange pushes is released already when that round is ours or later
    // (with our push, whose reply was lost; or without us, when it had declared this region
    // dead): the full values are its result, and our rounds are mapped onto its count from there
    // (round_shift). Otherwise it lost rounds (an older checkpoint, or our unreleased pushes
    // dropped), and our delta against these values carries them again: the shift stays, and the
    // next push sits out the rounds between (wire::Push::skip).
    const auto ours = static_cast<int64_t>(resync_round_);
    if (static_cast<int64_t>(pr.round) > ours - round_shift)
      round_shift = ours - static_cast<int64_t>(pr.round);
    expects_next_ = pr.round + 1;
  }
  tally.released =
      std::min(tally.released, static_cast<uint64_t>(static_cast<int64_t>(pr.round) + round_shift));
  if (full_ == FullPull::final) final_hash = values_hash_of(pr, decoded);
  const auto kind = full_;
  full_.reset();
  if (!kind) {
    pulled(pr.version);
  } else if (kind == FullPull::resync) {
    resynced(pr.version);
  } else {
    version = pr.version;
    pull_id_.reset();
  }
}

void LeaderShard::push(uint64_t request, uint64_t server_round) {
  expect(phase_ == ShardPhase::idle, "push");
  phase_ = ShardPhase::pushing;
  push_id_ = request;
  expects_next_ = server_round + 1;
  pulled_early_ = false;
  awaited_silence_ = std::chrono::milliseconds(0);
}

void LeaderShard::push_answered() {
  expect((phase_ == ShardPhase::pushing || phase_ == ShardPhase::deferred ||
          phase_ == ShardPhase::flushing) &&
             push_id_,
         "push_answered");
  push_id_.reset();
  // A pull answered before its push (replies striped over several connections may cross) is
  // done: the exchange is over for the shard.
  if (phase_ == ShardPhase::pushing)
    phase_ =
        pull_id_ ? ShardPhase::pulling : (pulled_early_ ? ShardPhase::idle : ShardPhase::pushed);
  else if (phase_ == ShardPhase::deferred && pulled_early_)
    phase_ = ShardPhase::merged;
  if (phase_ == ShardPhase::flushing) {
    phase_ = ShardPhase::idle;
    flush_held = true;
  }
}

void LeaderShard::pull(uint64_t request) {
  expect(phase_ == ShardPhase::pushing || phase_ == ShardPhase::pushed ||
             (phase_ == ShardPhase::deferred && !push_id_ && !pull_id_),
         "pull");
  pull_id_ = request;
  if (phase_ == ShardPhase::pushed) phase_ = ShardPhase::pulling;
}

void LeaderShard::pulled(uint64_t version_pulled) {
  expect((exchanging() || phase_ == ShardPhase::deferred) && pull_id_, "pulled");
  version = version_pulled;
  pull_id_.reset();
  if (phase_ == ShardPhase::deferred)
    phase_ = push_id_ ? ShardPhase::deferred : ShardPhase::merged;
  else
    phase_ = push_id_ ? ShardPhase::pushing : ShardPhase::idle;
  pulled_early_ = push_id_.has_value();
}

void LeaderShard::defer(uint64_t server_round) {
  expect(exchanging(), "defer");
  phase_ = ShardPhase::deferred;
  deferred_round_ = server_round;
}

void LeaderShard::defer_lost(uint64_t server_round) {
  expect(phase_ == ShardPhase::needs_resync, "defer_lost");
  phase_ = ShardPhase::deferred_lost;
  deferred_round_ = server_round;
}

void LeaderShard::connected(uint64_t server_next_round) { expects_next_ = server_next_round; }

void LeaderShard::lost() {
  push_id_.reset();
  pull_id_.reset();
  full_.reset();
  phase_ = deferred() ? ShardPhase::deferred_lost : ShardPhase::needs_resync;
}

void LeaderShard::full_pull(uint64_t request, FullPull kind, uint64_t our_round) {
  expect(!pull_id_ && !push_id_ &&
             (kind == FullPull::resync ? needs_full_pull() : phase_ == ShardPhase::idle),
         "full_pull");
  pull_id_ = request;
  full_ = kind;
  resync_round_ = our_round;
}

void LeaderShard::give_up() {
  expect(phase_ == ShardPhase::idle && full_ == FullPull::final, "give_up");
  pull_id_.reset();
  full_.reset();
}

void LeaderShard::resynced(uint64_t version_pulled) {
  expect(needs_full_pull(), "resynced");
  version = version_pulled;
  pull_id_.reset();
  phase_ = phase_ == ShardPhase::deferred_lost ? ShardPhase::merged : ShardPhase::idle;
}

void LeaderShard::flush(uint64_t request) {
  expect(phase_ == ShardPhase::idle && !pull_id_, "flush");
  phase_ = ShardPhase::flushing;
  push_id_ = request;
}

void LeaderShard::hand_back(uint64_t our_next_round, int64_t region_shift) {
  expect(phase_ == ShardPhase::merged || phase_ == ShardPhase::deferred_lost, "hand_back");
  if (phase_ == ShardPhase::deferred_lost) {
    phase_ = ShardPhase::needs_resync;  // the full pull maps its rounds again
    return;
  }
  // The region's shift, the rounds it was deferred for sat out; a smaller one only when its
  // server is further along (it released rounds without this region) than that would allow.
  round_shift = std::min(
      region_shift, static_cast<int64_t>(our_next_round) - static_cast<int64_t>(expects_next_));
  phase_ = ShardPhase::idle;
}

}  // namespace geotrain::worker
