#include "worker/region/local_ranks.hpp"

#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace geotrain::worker {

void run_local_ranks(int size, const std::string& prefix,
                     const std::function<void(int rank, gloo::rendezvous::Store& store)>& body) {
  gloo::rendezvous::HashStore store;
  std::vector<std::thread> threads;
  std::exception_ptr error;
  std::mutex mu;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        gloo::rendezvous::PrefixStore prefixed(prefix, store);
        body(r, prefixed);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!error) error = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace geotrain::worker
