#include "server/payload_pool.hpp"

#include <algorithm>
#include <mutex>
#include <vector>

#include "server/huge_pages.hpp"
#include "wire/messages.hpp"

namespace geotrain::server {

struct PayloadPool::State {
  explicit State(size_t max) : max_idle(max) {}
  void put(Bytes&& b) {
    std::lock_guard lock(mutex);
    if (idle.size() < max_idle) idle.push_back(std::move(b));
  }

  const size_t max_idle;
  mutable std::mutex mutex;
  std::vector<Bytes> idle;
};

// A payload on its way through ZeroMQ, and the pool it goes back to when ZeroMQ is done.
struct PayloadPool::InFlight {
  InFlight(Bytes&& b, std::shared_ptr<State> h) : bytes(std::move(b)), home(std::move(h)) {}
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() { home->put(std::move(bytes)); }
  Bytes bytes;
  std::shared_ptr<State> home;
};

PayloadPool::PayloadPool(size_t max_idle) : state_(std::make_shared<State>(max_idle)) {}

PayloadPool::~PayloadPool() = default;

Bytes PayloadPool::acquire(size_t bytes) {
  Bytes out;
  {
    std::lock_guard lock(state_->mutex);
    auto& idle = state_->idle;
    auto it =
        std::find_if(idle.begin(), idle.end(), [&](const Bytes& b) { return b.size() == bytes; });
    if (it == idle.end())
      it = std::max_element(idle.begin(), idle.end(), [](const Bytes& a, const Bytes& b) {
        return a.capacity() < b.capacity();
      });
    if (it != idle.end()) {
      out = std::move(*it);
      idle.erase(it);
    }
  }
  if (out.capacity() < bytes) {
    // A new buffer (an idle one too small is dropped, not copied): ask for huge pages before
    // its first write faults the pages in.
    out = Bytes();
    out.reserve(bytes);
    advise_huge_pages(out.data(), out.capacity());
  }
  out.resize(bytes);  // a no-op for a buffer of the right size: no zero-fill
  return out;
}

wire::Frame PayloadPool::frame(Bytes&& payload) {
  auto owner = std::make_unique<InFlight>(std::move(payload), state_);
  const ConstByteSpan view(owner->bytes);
  return wire::frame_owning(view, std::move(owner));
}

size_t PayloadPool::idle() const {
  std::lock_guard lock(state_->mutex);
  return state_->idle.size();
}

}  // namespace geotrain::server
