#include "server/payload_pool.hpp"

#include <algorithm>
#include <mutex>
#include <vector>

#include "server/huge_pages.hpp"

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

// A payload on its way through ZeroMQ, and the pool it goes back to.
struct PayloadPool::InFlight {
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

zmq::message_t PayloadPool::frame(Bytes&& payload) {
  auto owner = std::make_unique<InFlight>(InFlight{std::move(payload), state_});
  // The C callback receives the owner as its hint: ZeroMQ holds it until the frame is freed.
  zmq::message_t m(
      owner->bytes.data(), owner->bytes.size(),
      [](void*, void* hint) {
        std::unique_ptr<InFlight> back(static_cast<InFlight*>(hint));
        back->home->put(std::move(back->bytes));
      },
      owner.get());
  owner.release();
  return m;
}

size_t PayloadPool::idle() const {
  std::lock_guard lock(state_->mutex);
  return state_->idle.size();
}

}  // namespace geotrain::server
