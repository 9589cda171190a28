// Frame: one frame of a message (frame 0 the Cap'n Proto header, then the payload frames) as the
// transport carries it: its bytes handed to ZeroMQ and back without copying. Move-only. The
// layers above wire/ (server/, worker/, bench, tests) make and read frames through this type and
// the functions below; only wire/'s channels see the ZeroMQ message inside (message(), the
// constructor from one).
#pragma once

#include <zmq.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "core/span.hpp"

namespace geotrain::wire {

class Frame {
 public:
  Frame() = default;
  // `size` bytes, not initialised (the caller fills them).
  explicit Frame(size_t size) : message_(size) {}
  // A copy of `size` bytes at `data`, or of `text`.
  Frame(const void* data, size_t size) : message_(data, size) {}
  explicit Frame(std::string_view text) : message_(text.data(), text.size()) {}
  // A frame over `bytes` without a copy and without an owner: the caller keeps them alive until
  // the frame is sent (benchmarks and tests, which place payloads where they want them).
  static Frame borrowed(ConstByteSpan bytes) {
    return Frame(
        zmq::message_t(const_cast<std::byte*>(bytes.data()), bytes.size(), nullptr, nullptr));
  }
  Frame(Frame&&) noexcept = default;
  Frame& operator=(Frame&&) noexcept = default;

  ConstByteSpan bytes() const { return {static_cast<const std::byte*>(data()), size()}; }
  size_t size() const { return message_.size(); }
  const void* data() const { return message_.data(); }
  std::string to_string() const { return message_.to_string(); }
  void* data() { return message_.data(); }

  // wire/'s channels only: the ZeroMQ message, moved in and out.
  explicit Frame(zmq::message_t&& message) : message_(std::move(message)) {}
  zmq::message_t& message() { return message_; }

 private:
  zmq::message_t message_;
};

// A frame over `bytes` (no copy) that owns `owner` until ZeroMQ frees the frame and then
// destroys it, on whichever thread frees the frame. `owner` must keep `bytes` alive.
template <typename Owner>
Frame frame_owning(ConstByteSpan bytes, std::unique_ptr<Owner> owner) {
  zmq::message_t m(
      const_cast<std::byte*>(bytes.data()), bytes.size(),
      [](void*, void* hint) { delete static_cast<Owner*>(hint); }, owner.get());
  owner.release();  // now the frame's: the callback above deletes it
  return Frame(std::move(m));
}

// A frame that takes ownership of `bytes` without copying them.
Frame frame_from_bytes(Bytes&& bytes);
inline ConstByteSpan frame_bytes(const Frame& f) { return f.bytes(); }

}  // namespace geotrain::wire
