// Communicator: the intra-region collective interface the trainer sees (gloo-style: the
// algorithm above sees only this small interface; GlooCommunicator on CPUs over host memory,
// NcclCommunicator on GPUs over DEVICE memory: what a span points to is the implementation's
// contract, stated in its header).
//
// Calls are blocking and collective: every rank of the region calls them in the same order with
// the same sizes. Buffers are borrowed for the duration of the call. An implementation is used
// by one thread at a time.
#pragma once

#include <cstdint>
#include <numeric>
#include <span>

#include "core/error.hpp"
#include "core/error_types.hpp"
#include "core/span.hpp"

namespace geotrain::worker {

// A collective failed: a member died (its sockets closed) or did not answer within the group's
// timeout. The communicator is unusable; an elastic region re-forms its group
// (worker/region/region_group.hpp).
class GroupBroken : public SystemError {
 public:
  using SystemError::SystemError;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: data becomes the element-wise sum over all ranks.
  virtual void allreduce_sum(FloatSpan data) = 0;
  // In place: every rank's data becomes root's.
  virtual void broadcast(FloatSpan data, int root) = 0;

  // The two halves of an AllReduce, for state sharded over the ranks (ZeRO inside a region,
  // worker/training/zero_shards.hpp). `counts`: one per rank, in rank order, summing to
  // data.size(); rank r's range starts after the counts of the ranks before it.
  // reduce_scatter_sum: afterwards this rank's range of data holds the element-wise sum over all
  // ranks of that range; the rest of data is unspecified. allgather: afterwards every rank's
  // range of data holds that rank's values (pure copies, no arithmetic: any bit pattern travels
  // unchanged). These defaults are the reference semantics over allreduce_sum and broadcast
  // (correct, at an AllReduce's traffic and one broadcast per rank); GlooCommunicator overrides
  // both with their own collectives.
  virtual void reduce_scatter_sum(FloatSpan data, std::span<const uint64_t> counts) {
    check_counts(data.size(), counts);
    allreduce_sum(data);
  }
  virtual void allgather(FloatSpan data, std::span<const uint64_t> counts) {
    check_counts(data.size(), counts);
    uint64_t offset = 0;
    for (int r = 0; r < size(); ++r) {
      broadcast(data.subspan(offset, counts[r]), r);
      offset += counts[r];
    }
  }

 protected:
  // InputError unless counts has size() entries summing to elements.
  void check_counts(size_t elements, std::span<const uint64_t> counts) const {
    GT_REQUIRE(counts.size() == static_cast<size_t>(size()),
               "collective: {} shard counts for a group of {}", counts.size(), size());
    const uint64_t total = std::accumulate(counts.begin(), counts.end(), uint64_t{0});
    GT_REQUIRE(total == elements, "collective: the shard counts add up to {}, the buffer has {}",
               total, elements);
  }
};

}  // namespace geotrain::worker
