#include "wire/stripe.hpp"

#include <algorithm>
#include <cstring>
#include <memory>

#include "core/error.hpp"
#include "wire/messages.hpp"

namespace geotrain::wire {

namespace {

constexpr char kMagic[8] = {'G', 'T', 'S', 'T', 'R', 'I', 'P', 'E'};

template <typename T>
void put(std::byte* at, T v) {
  std::memcpy(at, &v, sizeof v);  // little-endian hosts only (DESIGN.md)
}
template <typename T>
T take(const std::byte* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

// A piece of `frame` as a ZeroMQ message without a copy: it holds the frame until ZeroMQ has sent
// it.
Frame slice(const std::shared_ptr<Frame>& frame, size_t offset, size_t bytes) {
  if (bytes == 0) return Frame();
  auto* keep = new std::shared_ptr<Frame>(frame);  // owned by ZeroMQ until freed below
  return Frame(zmq::message_t(
      static_cast<char*>(frame->data()) + offset, bytes,
      [](void*, void* hint) { delete static_cast<std::shared_ptr<Frame>*>(hint); }, keep));
}

}  // namespace

Frame encode_chunk_header(const ChunkHeader& h) {
  Frame m(ChunkHeader::kBytes);
  auto* b = static_cast<std::byte*>(m.data());
  std::memcpy(b, kMagic, 8);
  put(b + 8, h.sender);
  put(b + 16, h.seq);
  put(b + 24, h.chunk);
  put(b + 28, h.chunks);
  put(b + 32, h.lanes);
  put(b + 34, h.lane);
  put(b + 36, static_cast<uint16_t>(h.kind));
  put(b + 38, uint16_t{0});
  put(b + 40, h.frame);
  put(b + 44, h.frames);
  put(b + 48, h.frame_bytes);
  put(b + 56, h.offset);
  return m;
}

std::optional<ChunkHeader> decode_chunk_header(const Frame& frame) {
  if (frame.size() != ChunkHeader::kBytes || std::memcmp(frame.data(), kMagic, 8) != 0)
    return std::nullopt;
  const auto* b = static_cast<const std::byte*>(frame.data());
  ChunkHeader h;
  h.sender = take<uint64_t>(b + 8);
  h.seq = take<uint64_t>(b + 16);
  h.chunk = take<uint32_t>(b + 24);
  h.chunks = take<uint32_t>(b + 28);
  h.lanes = take<uint16_t>(b + 32);
  h.lane = take<uint16_t>(b + 34);
  const auto kind = take<uint16_t>(b + 36);
  h.frame = take<uint32_t>(b + 40);
  h.frames = take<uint32_t>(b + 44);
  h.frame_bytes = take<uint64_t>(b + 48);
  h.offset = take<uint64_t>(b + 56);
  if (kind > 2)
    throw WireError(ErrorCode::malformed,
                    fmt::format("stripe chunk: kind {} is not data, tick or abort", kind));
  h.kind = static_cast<ChunkKind>(kind);
  if (h.lanes == 0 || h.lanes > kMaxLanes || h.lane >= h.lanes || h.seq == 0 ||
      h.seq >= (uint64_t{1} << 32))
    throw WireError(
        ErrorCode::malformed,
        fmt::format("stripe chunk: lane {} of {}, seq {}: out of range", h.lane, h.lanes, h.seq));
  if (h.kind == ChunkKind::data &&
      (h.chunk >= h.chunks || h.frame >= h.frames || h.offset > h.frame_bytes))
    throw WireError(ErrorCode::malformed,
                    fmt::format("stripe chunk: chunk {} of {}, frame {} of {}, offset {} of {}",
                                h.chunk, h.chunks, h.frame, h.frames, h.offset, h.frame_bytes));
  if (h.kind == ChunkKind::abort && h.offset < h.seq)
    throw WireError(ErrorCode::malformed,
                    fmt::format("stripe abort: last {} before first {}", h.offset, h.seq));
  return h;
}

Striper::Striper(uint16_t lanes, uint64_t sender, size_t piece_bytes)
    : lanes_(lanes), sender_(sender), piece_bytes_(piece_bytes), owed_(lanes) {
  GT_ASSERT(lanes >= 1 && piece_bytes >= 1, "striper: lanes {} piece {}", lanes, piece_bytes);
}

std::vector<Chunk> Striper::cut(std::vector<Frame>&& frames) {
  GT_ASSERT(!frames.empty(), "striper: a message needs frame 0");
  ++seq_;
  struct Piece {
    uint32_t frame;
    uint64_t offset, bytes;
  };
  // About eight pieces per lane for a large message: even shares, few chunks to queue.
  uint64_t payload = 0;
  for (size_t f = 1; f < frames.size(); ++f) payload += frames[f].size();
  const uint64_t piece =
      std::max<uint64_t>(piece_bytes_, (payload + 8 * lanes_ - 1) / (8 * lanes_));
  std::vector<Piece> pieces{{0, 0, frames[0].size()}};  // frame 0 whole: chunk 0, lane 0
  for (uint32_t f = 1; f < frames.size(); ++f) {
    const uint64_t size = frames[f].size();
    uint64_t at = 0;
    do {
      const uint64_t n = std::min<uint64_t>(piece, size - at);
      pieces.push_back({f, at, n});
      at += n;
    } while (at < size);
  }
  std::vector<bool> used(lanes_, false);
  for (size_t k = 0; k < pieces.size(); ++k) used[k % lanes_] = true;

  std::vector<Chunk> out;
  for (uint16_t lane = 1; lane < lanes_; ++lane) {
    if (used[lane] || !owed_[lane]) continue;
    ChunkHeader t{sender_, seq_, 0, 0, lanes_, lane, ChunkKind::tick};
    Chunk c{lane, {}};
    c.frames.push_back(encode_chunk_header(t));
    out.push_back(std::move(c));
    owed_[lane].reset();
  }
  std::vector<std::shared_ptr<Frame>> shared;
  shared.reserve(frames.size());
  for (auto& f : frames) shared.push_back(std::make_shared<Frame>(std::move(f)));
  const auto chunks = static_cast<uint32_t>(pieces.size());
  for (uint32_t k = 0; k < chunks; ++k) {
    const auto& p = pieces[k];
    const auto lane = static_cast<uint16_t>(k % lanes_);
    ChunkHeader h{sender_,
                  seq_,
                  k,
                  chunks,
                  lanes_,
                  lane,
                  ChunkKind::data,
                  p.frame,
                  static_cast<uint32_t>(frames.size()),
                  shared[p.frame]->size(),
                  p.offset};
    Chunk c{lane, {}};
    c.frames.push_back(encode_chunk_header(h));
    c.frames.push_back(slice(shared[p.frame], p.offset, p.bytes));
    out.push_back(std::move(c));
    owed_[lane] = seq_;  // the earlier messages on this lane are followed by this one
  }
  return out;
}

Chunk Striper::abort(uint64_t first, uint64_t last) const {
  ChunkHeader h{sender_, first, 0, 0, lanes_, 0, ChunkKind::abort};
  h.offset = last;
  Chunk c{0, {}};
  c.frames.push_back(encode_chunk_header(h));
  return c;
}

void Reassembler::restart(uint64_t sender, uint16_t lanes) {
  dropped_ += partial_.size();
  partial_.clear();
  partial_bytes_ = 0;
  sender_ = sender;
  next_ = 1;
  lane_position_.assign(lanes, std::nullopt);
}

void Reassembler::add(uint16_t lane, const ChunkHeader& h, Frame&& piece,
                      std::deque<std::vector<Frame>>& out) {
  if (h.lane != lane)
    throw WireError(ErrorCode::malformed,
                    fmt::format("stripe chunk: says lane {}, came on lane {}", h.lane, lane));
  if (h.sender != sender_ || h.lanes != lane_position_.size()) restart(h.sender, h.lanes);
  if (h.kind == ChunkKind::abort) {
    const uint64_t last = std::min(h.offset, h.seq + 4096);  // a bound on what one abort marks
    for (uint64_t s = std::max(h.seq, next_); s <= last; ++s) {
      auto it = partial_.find(s);
      if (it == partial_.end()) {
        if (partial_.size() >= limits_.max_partial_messages) break;
        it = partial_.emplace(s, Partial{}).first;
      }
      if (it->second.chunks == 0 || it->second.received < it->second.chunks)
        it->second.aborted = true;  // a message complete already is not taken back
    }
  } else {
    const uint64_t pos =
        h.kind == ChunkKind::tick ? position(h.seq - 1, UINT32_MAX) : position(h.seq, h.chunk);
    auto& lp = lane_position_[lane];
    lp = std::max(lp.value_or(0), pos);
    if (h.kind == ChunkKind::data && h.seq >= next_) {
      auto [it, fresh] = partial_.try_emplace(h.seq);
      if (fresh && partial_.size() > limits_.max_partial_messages) {
        partial_.erase(it);
        restart(sender_, h.lanes);  // a peer that never completes messages: start afresh
        return;
      }
      try {
        place(it->second, h, std::move(piece));
      } catch (...) {
        forget(h.seq);
        ++dropped_;
        throw;
      }
      if (partial_bytes_ > limits_.max_partial_bytes) {
        restart(sender_, h.lanes);
        return;
      }
    }
  }
  deliver(out);
}

void Reassembler::place(Partial& p, const ChunkHeader& h, Frame&& piece) {
  if (h.frames > limits_.max_frames + 1 || h.frame_bytes > limits_.max_frame_bytes)
    throw WireError(
        ErrorCode::malformed,
        fmt::format("stripe chunk: {} frames, a frame of {} bytes: over the limits "
                    "({} frames, {} bytes)",
                    h.frames, h.frame_bytes, limits_.max_frames + 1, limits_.max_frame_bytes));
  if (p.chunks == 0 && p.got.empty()) {
    p.chunks = h.chunks;
    p.lanes = h.lanes;
    p.got.assign(h.chunks, false);
    p.frames.resize(h.frames);
    p.frame_bytes.assign(h.frames, UINT64_MAX);
  }
  if (h.chunks != p.chunks || h.frames != p.frames.size())
    throw WireError(ErrorCode::malformed,
                    fmt::format("stripe chunk: message {} has {} chunks / {} frames, a chunk says "
                                "{} / {}",
                                h.seq, p.chunks, p.frames.size(), h.chunks, h.frames));
  if (p.got[h.chunk])
    throw WireError(ErrorCode::malformed,
                    fmt::format("stripe chunk: chunk {} of message {} twice", h.chunk, h.seq));
  auto& fb = p.frame_bytes[h.frame];
  if (fb == UINT64_MAX) {
    fb = h.frame_bytes;
    p.frames[h.frame] = Frame(h.frame_bytes);
    partial_bytes_ += h.frame_bytes;
  }
  if (fb != h.frame_bytes || piece.size() > fb - h.offset)
    throw WireError(ErrorCode::malformed,
                    fmt::format("stripe chunk: frame {} of message {} is {} bytes, a piece of {} "
                                "at {} says {}",
                                h.frame, h.seq, fb, piece.size(), h.offset, h.frame_bytes));
  if (piece.size() > 0)
    std::memcpy(static_cast<char*>(p.frames[h.frame].data()) + h.offset, piece.data(),
                piece.size());
  p.got[h.chunk] = true;
  ++p.received;
}

bool Reassembler::lost(uint64_t seq, const Partial* p) const {
  auto passed = [&](uint16_t lane, uint32_t chunk) {
    const auto& lp = lane < lane_position_.size() ? lane_position_[lane] : std::nullopt;
    return lp && *lp > position(seq, chunk);
  };
  if (p && p->aborted) return true;
  if (!p || p->chunks == 0) return passed(0, 0);  // chunk 0 travels on lane 0
  for (uint32_t k = 0; k < p->chunks; ++k)
    if (!p->got[k] && passed(static_cast<uint16_t>(k % p->lanes), k)) return true;
  return false;
}

void Reassembler::deliver(std::deque<std::vector<Frame>>& out) {
  for (;;) {
    auto it = partial_.find(next_);
    const Partial* p = it == partial_.end() ? nullptr : &it->second;
    if (p && !p->aborted && p->chunks > 0 && p->received == p->chunks) {
      out.push_back(std::move(it->second.frames));
      forget(next_);
      ++next_;
      continue;
    }
    if (!lost(next_, p)) return;
    ++dropped_;
    if (p) {
      forget(next_);
      ++next_;
      continue;
    }
    // Unknown and lost: so is every message up to the next one that lane 0 or a partial knows.
    uint64_t to = *lane_position_[0] >> 32;
    auto later = partial_.lower_bound(next_);
    if (later != partial_.end()) to = std::min(to, later->first);
    next_ = std::max(next_ + 1, to);
  }
}

void Reassembler::forget(uint64_t seq) {
  auto it = partial_.find(seq);
  if (it == partial_.end()) return;
  for (size_t f = 0; f < it->second.frame_bytes.size(); ++f)
    if (it->second.frame_bytes[f] != UINT64_MAX) partial_bytes_ -= it->second.frame_bytes[f];
  partial_.erase(it);
}

}  // namespace geotrain::wire
