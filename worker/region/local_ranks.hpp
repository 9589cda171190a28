// A region's ranks as threads of one process (gloo's testing style), for the tests and the
// benchmarks that study a region on one machine: body(rank, store) runs on `size` threads, each
// meeting the others through one in-memory Gloo HashStore (under a PrefixStore of its own, so
// that each rank builds its communicator or backend from `store` as a worker process would from
// its region's server); the first failure is rethrown once every thread has joined. Blocks until
// then.
#pragma once

#include <functional>
#include <string>

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace geotrain::worker {

void run_local_ranks(int size, const std::string& prefix,
                     const std::function<void(int rank, gloo::rendezvous::Store& store)>& body);

}  // namespace geotrain::worker
