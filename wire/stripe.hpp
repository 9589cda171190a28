// Striping: one logical message cut into chunks over several ZeroMQ connections ("lanes") to one
// peer, and put back together in order at the other end (docs/protocol.md, "Parallel streams").
// Over a long-haul link one TCP connection moves at most window / RTT; N lanes move N windows.
// Pure logic, no sockets: wire/striped_channel moves the chunks.
//
// Cutting (Striper): frame 0 (the protocol header) is chunk 0 and always travels on lane 0;
// every later frame is cut into pieces of at most piece_bytes, numbered on, and chunk k travels
// on lane k % lanes (pieces: about eight per lane, at least piece_bytes). A chunk is a two-frame
// ZeroMQ message: a 64-byte ChunkHeader and the piece. Messages are numbered per sender (`seq`,
// from 1); `sender` is a random id a new sender (a restarted process) draws, so that its numbering
// starts afresh at the receiver.
//
// Order and loss (Reassembler): every lane is FIFO (one TCP connection, or its successor after a
// reconnect), so a chunk that has not arrived when its lane has delivered something sent after
// it was lost with a broken connection. Messages are delivered in `seq` order; a message with a
// lost chunk is dropped, exactly as one connection's reset drops a message today, and the
// protocol above recovers (heartbeat probes, rejoin). Two things keep a lane from staying silent
// after a loss: a lane that carried chunks and is not used by the next message gets a tick (an
// empty chunk saying "past every message before seq"), and a sender that could not send a chunk
// sends an abort (messages first..last) on lane 0.
//
// Limits bound what a peer can make a receiver hold: frames per message, bytes per frame, and
// the partial messages and bytes a reassembler keeps (over them, it starts afresh: its partial
// messages are dropped, counted in dropped()).
//
// Not thread-safe; plain values otherwise. Buffers: Striper slices frames without copying (the
// pieces hold a reference to the frame); Reassembler copies each piece once into its frame.
#pragma once

#include <zmq.hpp>

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "wire/frame.hpp"

namespace geotrain::wire {

// Lanes per peer: a lane's routing id ends in its index, one byte.
inline constexpr uint16_t kMaxLanes = 64;

enum class ChunkKind : uint16_t { data = 0, tick = 1, abort = 2 };

struct ChunkHeader {
  static constexpr size_t kBytes = 64;
  uint64_t sender = 0;  // the sending end's random id
  uint64_t seq = 0;     // data: the message; tick: past every message before seq; abort: first
  uint32_t chunk = 0;   // data: index in the message
  uint32_t chunks = 0;  // data: the message's chunk count
  uint16_t lanes = 1;   // the sender's lane count
  uint16_t lane = 0;    // the lane this chunk was sent on
  ChunkKind kind = ChunkKind::data;
  uint32_t frame = 0;        // data: which frame of the message the piece belongs to
  uint32_t frames = 0;       // data: the message's frame count
  uint64_t frame_bytes = 0;  // data: that frame's size
  uint64_t offset = 0;       // data: the piece's offset in the frame; abort: the last seq aborted
};

// 64 bytes, magic "GTSTRIPE" first.
Frame encode_chunk_header(const ChunkHeader& h);
// nullopt: not a chunk header (wrong size or magic): the message is a plain protocol message.
// A chunk header with impossible fields throws WireError naming them.
std::optional<ChunkHeader> decode_chunk_header(const Frame& frame);

struct Chunk {
  uint16_t lane = 0;
  std::vector<Frame> frames;  // the header, then the piece (data chunks only)
};

class Striper {
 public:
  Striper(uint16_t lanes, uint64_t sender, size_t piece_bytes = kDefaultPieceBytes);

  // A message's chunks in sending order: ticks for lanes owed one first, then the data.
  std::vector<Chunk> cut(std::vector<Frame>&& frames);
  // Sending the chunks of messages [first, last] on some lane failed (that lane is gone): the
  // abort for lane 0 that tells the receiver not to wait for them.
  Chunk abort(uint64_t first, uint64_t last) const;
  // The oldest message whose chunks on `lane` no later item has followed yet (nullopt: none).
  std::optional<uint64_t> owed_since(uint16_t lane) const { return owed_[lane]; }
  uint64_t last_seq() const { return seq_; }
  uint16_t lanes() const { return lanes_; }

  // The smallest piece: large enough that ZeroMQ's per-message cost vanishes. A larger message is
  // cut into about eight pieces per lane, so that the lanes share it evenly.
  static constexpr size_t kDefaultPieceBytes = size_t{256} << 10;

 private:
  uint16_t lanes_;
  uint64_t sender_;
  size_t piece_bytes_;
  uint64_t seq_ = 0;
  std::vector<std::optional<uint64_t>> owed_;  // per lane: first message not yet followed
};

struct ReassemblyLimits {
  uint64_t max_frame_bytes = uint64_t{1} << 30;
  size_t max_frames = 4096;
  size_t max_partial_messages = 256;
  uint64_t max_partial_bytes = uint64_t{4} << 30;
};

class Reassembler {
 public:
  explicit Reassembler(ReassemblyLimits limits = {}) : limits_(limits) {}

  // One chunk received on `lane`; appends the messages it completes, in order, to `out`. A chunk
  // inconsistent with the message's earlier chunks (or with the limits) throws WireError; the
  // reassembler then holds nothing of that message.
  void add(uint16_t lane, const ChunkHeader& h, Frame&& piece, std::deque<std::vector<Frame>>& out);

  uint64_t dropped() const { return dropped_; }  // messages given up as lost
  size_t partial_messages() const { return partial_.size(); }

 private:
  struct Partial {
    uint32_t chunks = 0;  // 0: chunk 0 not seen yet
    uint16_t lanes = 1;
    std::vector<bool> got;
    uint32_t received = 0;
    std::vector<Frame> frames;
    std::vector<uint64_t> frame_bytes;
    bool aborted = false;
  };
  // A lane's position: the last thing it delivered, as (seq << 32) | chunk; a tick for seq is
  // (seq - 1, all chunks).
  static uint64_t position(uint64_t seq, uint32_t chunk) { return (seq << 32) | chunk; }

  void restart(uint64_t sender, uint16_t lanes);
  void place(Partial& p, const ChunkHeader& h, Frame&& piece);
  bool lost(uint64_t seq, const Partial* p) const;
  void deliver(std::deque<std::vector<Frame>>& out);
  void forget(uint64_t seq);

  ReassemblyLimits limits_;
  uint64_t sender_ = 0;
  uint64_t next_ = 1;  // the message delivered next
  std::vector<std::optional<uint64_t>> lane_position_;
  std::map<uint64_t, Partial> partial_;
  uint64_t partial_bytes_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace geotrain::wire
