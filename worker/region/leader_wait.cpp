#include "worker/region/leader_wait.hpp"

#include <future>
#include <vector>

namespace geotrain::worker {

void wait_for_leader(Communicator& comm, std::chrono::milliseconds beat,
                     const std::function<void()>& work) {
  std::vector<float> over{0.0f};  // the leader's 1: its work is over
  if (comm.rank() != 0) {
    do {
      over[0] = 0.0f;
      comm.allreduce_sum(over);
    } while (over[0] == 0.0f);
    return;
  }
  auto done = std::async(std::launch::async, work);
  while (done.wait_for(beat) != std::future_status::ready) {
    over[0] = 0.0f;
    comm.allreduce_sum(over);
  }
  over[0] = 1.0f;
  comm.allreduce_sum(over);
  done.get();
}

}  // namespace geotrain::worker
