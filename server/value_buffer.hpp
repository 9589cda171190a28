// ValueBuffer: one version of a shard's values, stored as the body of an fp32 codec payload
// (compression/payload.hpp), so that a pull sends the values themselves without copying them.
//
// Copy-on-write: a shard never writes a version it has published. Every change computes the
// next version into a fresh buffer and then swaps it in, so a buffer that a pull handed to
// ZeroMQ stays as it was until ZeroMQ frees the frame, while the shard goes on. The same swap
// lets a push be checked while it is applied: nothing is visible until the swap.
//
// Layout: the 40-byte payload header sits right before the values, which start 64-byte aligned
// (huge-page aligned from 2 MiB up). A buffer is written once, by fill(): it is sealed,
// read-only from then on. Its payload header (with the checksum over the values) is written
// either by fill, which then hashes each block of values right after the caller wrote it (in
// cache), or later by the first call of payload_for_send(), with a pass of its own. Once it has
// its header it may be shared.
//
// Threads: a ValueBufferPool and its buffers' write accessors are for one thread (the server's
// loop). A buffer goes back to its pool from whatever thread drops the last reference to it
// (ZeroMQ's I/O thread for a sent frame), under a mutex, so the next writer sees it whole.
// Buffers may outlive their pool.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "compression/payload.hpp"
#include "core/span.hpp"
#include "server/pass_splitter.hpp"
#include "wire/frame.hpp"

namespace geotrain::server {

class ValueBuffer {
 public:
  ValueBuffer(const ValueBuffer&) = delete;
  ValueBuffer& operator=(const ValueBuffer&) = delete;
  ~ValueBuffer();

  // fill's `write(begin, block)` must write every value of `block`, which holds the values from
  // index `begin` on; it is called on consecutive blocks of kFillBlock values (the last one may
  // be shorter), in order.
  using Write = std::function<void(size_t begin, FloatSpan block)>;
  static constexpr size_t kFillBlock = compression::kChecksumBlock / sizeof(float);

  size_t size() const { return elements_; }
  ConstFloatSpan values() const { return {data(), elements_}; }
  bool sealed() const { return sealed_; }
  bool has_header() const { return has_header_; }
  // Writes the values through `write` and seals the buffer (asserts it is not sealed yet), with
  // the payload header when `header` is true. With a splitter, a buffer of kSplitElements or more
  // is written half by the splitter's thread (one call of `write` for the whole second half)
  // while this thread writes (and hashes) the first; hashing the second half waits for it.
  // `write` must then be safe to call from both threads on their disjoint ranges.
  void fill(const Write& write, PassSplitter* splitter = nullptr, bool header = true);
  // The values of a buffer not sealed yet (asserted), for a second thread that writes blocks of
  // them while fill() runs: fill's `write` must then wait, for such a block, until it is written.
  FloatSpan unsealed_values();
  // The values as an fp32 payload of a sealed buffer (asserted): writes the header first if fill
  // did not. Call before the buffer is shared.
  ConstByteSpan payload_for_send();
  // The payload of a buffer that has its header (asserted).
  ConstByteSpan payload() const;

 private:
  friend class ValueBufferPool;
  explicit ValueBuffer(size_t elements);
  float* data() const;
  ByteSpan payload_bytes() const;

  size_t elements_;
  size_t bytes_;        // allocated
  std::byte* storage_;  // header at storage_ + kLead - 40, values at storage_ + kLead
  bool sealed_ = false;
  bool has_header_ = false;
};

class ValueBufferPool {
 public:
  explicit ValueBufferPool(size_t elements, size_t max_idle = 4);
  ValueBufferPool(const ValueBufferPool&) = delete;
  ValueBufferPool& operator=(const ValueBufferPool&) = delete;
  ValueBufferPool(ValueBufferPool&&) = default;
  ValueBufferPool& operator=(ValueBufferPool&&) = default;
  ~ValueBufferPool();

  // An unsealed buffer of the pool's size, to fill(): an idle one when there is one (no
  // allocation, no page faults), else a new one.
  std::shared_ptr<ValueBuffer> acquire();
  // A frame of the payload of a buffer that has its header; it shares the buffer (no copy)
  // until ZeroMQ frees it.
  static wire::Frame frame(std::shared_ptr<const ValueBuffer> sealed);
  // Buffers waiting to be reused (tests).
  size_t idle() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace geotrain::server
