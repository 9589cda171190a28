// GlooCommunicator: Communicator over Gloo's TCP transport (CPU workers).
//
// Owns: a Gloo TCP device bound to `hostname` and a full-mesh Gloo context. Rendezvous goes
// through a gloo::rendezvous::Store that the caller provides and that must outlive the
// constructor call (the region's server key-value exchange in production, a shared HashStore
// when ranks are threads of one process in tests); pass a PrefixStore to keep runs apart.
// The constructor blocks until all `size` ranks have connected (or `timeout`: GroupBroken, as
// for a collective that fails; Stopped from the store passes through).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "worker/region/communicator.hpp"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}
}  // namespace gloo

namespace geotrain::worker {

struct GlooOptions {
  std::string hostname = "127.0.0.1";  // interface the TCP device binds to
  std::chrono::milliseconds timeout{30000};
};

class GlooCommunicator final : public Communicator {
 public:
  // InputError when rank is not in [0, size).
  GlooCommunicator(gloo::rendezvous::Store& store, int rank, int size,
                   const GlooOptions& options = {});
  ~GlooCommunicator() override;
  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce_sum(FloatSpan data) override;
  void broadcast(FloatSpan data, int root) override;

 private:
  int rank_, size_;
  std::shared_ptr<gloo::Context> context_;
  uint32_t tag_ = 0;  // advanced per collective, so consecutive operations never mix messages
};

}  // namespace geotrain::worker
