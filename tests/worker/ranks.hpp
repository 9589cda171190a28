// Ranks as threads of one process (gloo's testing style): body(comm) runs on `size` threads,
// each with its own Comm (GlooCommunicator, NcclCommunicator, ...) built over one in-memory
// HashStore under `prefix`; the first failure is rethrown once every thread has joined.
#pragma once

#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>

#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace geotrain::test {

template <typename Comm>
void run_ranks(int size, const std::string& prefix, const std::function<void(Comm&)>& body) {
  gloo::rendezvous::HashStore store;
  std::vector<std::thread> threads;
  std::exception_ptr error;
  std::mutex mu;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        gloo::rendezvous::PrefixStore prefixed(prefix, store);
        Comm comm(prefixed, r, size);
        body(comm);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!error) error = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace geotrain::test
