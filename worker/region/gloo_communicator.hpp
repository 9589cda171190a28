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
#include <vector>

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
  // An all-to-all of each rank's range (in pieces of at most kPieceElements per rank, through
  // scratch buffers owned here: 2 x size x min(kPieceElements, the longest range) floats), each
  // rank summing the pieces it receives in rank order: the same bits on every rank and from run
  // to run; with two ranks the same bits as allreduce_sum (a + b = b + a).
  void reduce_scatter_sum(FloatSpan data, std::span<const uint64_t> counts) override;
  // Gloo's ring allgatherv, in place.
  void allgather(FloatSpan data, std::span<const uint64_t> counts) override;

  static constexpr uint64_t kPieceElements = uint64_t{1} << 18;  // 1 MiB of fp32 per rank

 private:
  int rank_, size_;
  std::shared_ptr<gloo::Context> context_;
  uint32_t tag_ = 0;  // advanced per collective, so consecutive operations never mix messages
  std::vector<float> send_, receive_;  // reduce_scatter_sum's pieces
};

}  // namespace geotrain::worker
