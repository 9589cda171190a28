#include "server/value_buffer.hpp"

#include <algorithm>
#include <mutex>
#include <new>
#include <vector>

#include "core/error.hpp"
#include "server/huge_pages.hpp"
#include "wire/messages.hpp"

namespace geotrain::server {
namespace {

// Bytes before the values: room for the payload header, and the values start on a cache line.
constexpr size_t kLead = 64;
static_assert(kLead >= compression::kHeaderBytes && kLead % 64 == 0);

std::byte* allocate(size_t bytes) {
  if (bytes >= kHugePage) return static_cast<std::byte*>(allocate_huge(bytes));
  return static_cast<std::byte*>(::operator new (bytes, std::align_val_t{64}));
}

void deallocate(std::byte* p, size_t bytes) {
  if (bytes >= kHugePage)
    deallocate_huge(p, bytes);
  else
    ::operator delete (p, std::align_val_t{64});
}

}  // namespace

ValueBuffer::ValueBuffer(size_t elements)
    : elements_(elements), bytes_(kLead + elements * sizeof(float)), storage_(allocate(bytes_)) {}

ValueBuffer::~ValueBuffer() { deallocate(storage_, bytes_); }

float* ValueBuffer::data() const { return reinterpret_cast<float*>(storage_ + kLead); }

ByteSpan ValueBuffer::payload_bytes() const {
  return {storage_ + kLead - compression::kHeaderBytes,
          compression::kHeaderBytes + elements_ * sizeof(float)};
}

FloatSpan ValueBuffer::unsealed_values() {
  GT_ASSERT(!sealed_, "writing the values of a sealed (published) version");
  return {data(), elements_};
}

ConstByteSpan ValueBuffer::payload() const {
  GT_ASSERT(has_header_, "the payload of a value buffer without its header");
  return payload_bytes();
}

ConstByteSpan ValueBuffer::payload_for_send() {
  GT_ASSERT(sealed_, "sending a value buffer that is not filled");
  if (!has_header_) {
    compression::PayloadHeader h;
    h.codec = compression::CodecId::fp32;
    h.elements = elements_;
    compression::write_header(h, payload_bytes());
    has_header_ = true;
  }
  return payload_bytes();
}

void ValueBuffer::fill(const Write& write, PassSplitter* splitter, bool header) {
  GT_ASSERT(!sealed_, "writing the values of a sealed (published) version");
  const FloatSpan values(data(), elements_);
  // The split is a multiple of a block, so a block is either this thread's or the other's, and
  // no 64-byte line is written by both.
  const bool split = splitter != nullptr && elements_ >= kSplitElements;
  const size_t half = split ? elements_ / 2 / kFillBlock * kFillBlock : elements_;
  SplitTask high(split ? splitter : nullptr, [&] { write(half, values.subspan(half)); });
  if (header) {
    compression::PayloadHeader h;
    h.codec = compression::CodecId::fp32;
    h.elements = elements_;
    compression::write_payload(h, payload_bytes(), [&](size_t offset, ByteSpan block) {
      const size_t begin = offset / sizeof(float);
      if (begin < half)
        write(begin, values.subspan(begin, block.size() / sizeof(float)));
      else
        high.wait();  // for the other thread (once) before this block is hashed
    });
  } else {
    for (size_t begin = 0; begin < half; begin += kFillBlock)
      write(begin, values.subspan(begin, std::min(kFillBlock, half - begin)));
  }
  high.wait();
  sealed_ = true;
  has_header_ = header;
}

struct ValueBufferPool::State {
  State(size_t n, size_t max) : elements(n), max_idle(max) {}
  const size_t elements;
  const size_t max_idle;
  mutable std::mutex mutex;
  std::vector<std::unique_ptr<ValueBuffer>> idle;
};

ValueBufferPool::ValueBufferPool(size_t elements, size_t max_idle)
    : state_(std::make_shared<State>(elements, max_idle)) {}

ValueBufferPool::~ValueBufferPool() = default;

std::shared_ptr<ValueBuffer> ValueBufferPool::acquire() {
  std::unique_ptr<ValueBuffer> buffer;
  {
    std::lock_guard lock(state_->mutex);
    if (!state_->idle.empty()) {
      buffer = std::move(state_->idle.back());
      state_->idle.pop_back();
    }
  }
  if (!buffer) buffer.reset(new ValueBuffer(state_->elements));
  buffer->sealed_ = false;
  buffer->has_header_ = false;
  // The deleter hands the buffer back to the pool's state, which it keeps alive: the last
  // reference may be dropped by a frame freed after the pool is gone.
  return std::shared_ptr<ValueBuffer>(buffer.release(), [home = state_](ValueBuffer* b) {
    std::unique_ptr<ValueBuffer> owned(b);
    std::lock_guard lock(home->mutex);
    if (home->idle.size() < home->max_idle) home->idle.push_back(std::move(owned));
  });
}

wire::Frame ValueBufferPool::frame(std::shared_ptr<const ValueBuffer> sealed) {
  GT_ASSERT(sealed != nullptr, "a frame of no value buffer");
  const auto payload = sealed->payload();
  // The frame keeps a reference and drops it when ZeroMQ frees the frame.
  return wire::frame_owning(
      payload, std::make_unique<std::shared_ptr<const ValueBuffer>>(std::move(sealed)));
}

size_t ValueBufferPool::idle() const {
  std::lock_guard lock(state_->mutex);
  return state_->idle.size();
}

}  // namespace geotrain::server
