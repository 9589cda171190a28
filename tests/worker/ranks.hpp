// Ranks as threads of one process (gloo's testing style): body(comm) runs on `size` threads,
// each with its own Comm (GlooCommunicator, NcclCommunicator, ...) built over one in-memory
// HashStore under `prefix` (worker/region/local_ranks.hpp); the first failure is rethrown once
// every thread has joined.
#pragma once

#include <functional>
#include <string>

#include "worker/region/local_ranks.hpp"

namespace geotrain::test {

template <typename Comm>
void run_ranks(int size, const std::string& prefix, const std::function<void(Comm&)>& body) {
  worker::run_local_ranks(size, prefix, [&](int rank, gloo::rendezvous::Store& store) {
    Comm comm(store, rank, size);
    body(comm);
  });
}

}  // namespace geotrain::test
