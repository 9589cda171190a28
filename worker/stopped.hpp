// Stopped: the worker was asked to stop (SIGTERM, SIGINT) while it waited: for a server (thrown by
// worker/leader/reply_wait.hpp's collect() once the wait has lasted kStopGrace with the stop
// requested), or for the region's other ranks at the rendezvous (worker/region/server_store.hpp).
// What was in flight is abandoned; the process ends without it (cli/cmd_worker.cpp), its last
// snapshot standing.
#pragma once

#include <stdexcept>

namespace geotrain::worker {

class Stopped : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace geotrain::worker
