// PayloadPool: reusable buffers for the payload frames a server sends (pull replies).
//
// A pull's payload is encoded into a buffer from here and handed to ZeroMQ without a copy; the
// frame's free callback, which ZeroMQ calls once it has sent the bytes, gives the buffer back.
// A steady stream of pulls therefore allocates nothing, and - more to the point for shards of
// megabytes - page-faults and zero-fills nothing, which a fresh std::vector per pull does.
//
// Threads: acquire() and frame() are for the server's loop thread; buffers come back on whatever
// thread ZeroMQ frees the frame (its I/O thread for tcp, the receiver's for inproc), so the idle
// list is guarded by a mutex. Frames in flight keep the pool's state alive: they may outlive the
// PayloadPool object. At most `max_idle` buffers are kept; more are freed when they come back.
#pragma once

#include <cstddef>
#include <memory>

#include "core/span.hpp"
#include "wire/frame.hpp"

namespace geotrain::server {

class PayloadPool {
 public:
  explicit PayloadPool(size_t max_idle = 8);
  PayloadPool(const PayloadPool&) = delete;
  PayloadPool& operator=(const PayloadPool&) = delete;
  ~PayloadPool();

  // A buffer of `bytes` bytes whose content is unspecified: an idle buffer of that size when
  // there is one, else the idle buffer with the most capacity (resized), else a new one.
  Bytes acquire(size_t bytes);
  // A frame that owns `payload` (no copy) and gives it back to this pool when ZeroMQ frees it.
  wire::Frame frame(Bytes&& payload);
  // Buffers waiting to be reused (tests).
  size_t idle() const;

 private:
  struct State;
  struct InFlight;
  std::shared_ptr<State> state_;
};

}  // namespace geotrain::server
