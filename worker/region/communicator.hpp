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
};

}  // namespace geotrain::worker
