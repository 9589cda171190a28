// wait_for_leader: the region's ranks wait while their leader does work that may outlast the
// group's collective timeout (Gloo's, or NCCL's watchdog): at the end of a run the leader waits
// for the other regions' last rounds and flushes, minutes on an uneven fleet. The leader runs the
// work on a thread of its own and joins a one-float allreduce every `beat` meanwhile; the other
// ranks join them until the leader's says it is done, then all return together.
//
// Blocking and collective (every rank calls it, at the same point); `work` runs on the leader
// (rank 0) only, on another thread, and must not use `comm`. Rethrows the work's error on the
// leader after the wait ends for everyone.
#pragma once

#include <chrono>
#include <functional>

#include "worker/region/communicator.hpp"

namespace geotrain::worker {

void wait_for_leader(Communicator& comm, std::chrono::milliseconds beat,
                     const std::function<void()>& work);

}  // namespace geotrain::worker
