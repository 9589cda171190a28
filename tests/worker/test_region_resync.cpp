// resync_from with ranks as threads of one process over Gloo (rendezvous in an in-memory
// HashStore): after it, every rank holds the leader's place and training state, bit for bit.
#include <doctest/doctest.h>

#include <mutex>

#include "ranks.hpp"
#include "worker/region/gloo_communicator.hpp"
#include "worker/run/region_resync.hpp"

using namespace geotrain;
using namespace geotrain::worker;

namespace {

// A rank's own state: every value depends on the rank, so that a value not sent shows.
RegionState state_of(int rank, size_t params, size_t losses) {
  RegionState s;
  const auto r = static_cast<uint64_t>(rank);
  s.at = {10 + r,
          static_cast<uint32_t>(2 + r),
          16,
          150 + r,
          300 + r,
          1 + static_cast<uint32_t>(r),
          static_cast<uint32_t>(r)};
  // The merges its calendar has due: as many as the rank's number (a restarted rank has none).
  for (uint64_t m = 0; m < r; ++m)
    s.at.merges.push_back({(uint64_t{1} << 40) + 150 + r + m, static_cast<uint32_t>(m)});
  s.state.steps = 149 + r;
  s.state.optimizer_steps = 148 + r;
  s.state.guard_skipped = r;
  for (size_t i = 0; i < losses; ++i) s.state.guard_losses.push_back(0.1 * double(i) + double(r));
  for (size_t i = 0; i < params; ++i) {
    s.state.params.push_back(float(i) + 0.25f * float(r));
    s.state.optimizer_m.push_back(-float(i) - float(r));
    s.state.optimizer_v.push_back(float(r) * 1e-7f + float(i) * 1e-9f);
  }
  return s;
}

}  // namespace

TEST_CASE("after a resync every rank holds the leader's place and state, bit for bit") {
  std::mutex mu;
  std::vector<RegionState> got(3);
  test::run_ranks<GlooCommunicator>(3, "resync", [&](GlooCommunicator& comm) {
    // The ranks' guard windows differ in length too: the leader's wins.
    auto s = resync_from(comm, 0, state_of(comm.rank(), 1000, comm.rank() == 0 ? 5 : 3));
    std::lock_guard lock(mu);
    got[comm.rank()] = std::move(s);
  });
  const auto leader = state_of(0, 1000, 5);
  for (const auto& s : got) {
    CHECK(s.at.merges.empty());  // the leader's calendar: none due
    CHECK(s.at == leader.at);
    CHECK(s.state.steps == leader.state.steps);
    CHECK(s.state.optimizer_steps == leader.state.optimizer_steps);
    CHECK(s.state.guard_skipped == leader.state.guard_skipped);
    CHECK(s.state.guard_losses == leader.state.guard_losses);
    CHECK(s.state.params == leader.state.params);
    CHECK(s.state.optimizer_m == leader.state.optimizer_m);
    CHECK(s.state.optimizer_v == leader.state.optimizer_v);
  }
}

TEST_CASE("a resync refuses a leader whose model has another size, naming both") {
  std::mutex mu;
  std::vector<std::string> errors;
  test::run_ranks<GlooCommunicator>(2, "resync-size", [&](GlooCommunicator& comm) {
    try {
      (void)resync_from(comm, 0, state_of(comm.rank(), comm.rank() == 0 ? 100 : 90, 1));
    } catch (const InputError& e) {
      std::lock_guard lock(mu);
      errors.push_back(e.what());
    }
  });
  // Both refuse, before the state is sent: the rank whose sizes differ names them.
  REQUIRE(errors.size() == 2);
  const bool named =
      errors[0].find("the source has 100 parameters, this worker 90") != std::string::npos ||
      errors[1].find("the source has 100 parameters, this worker 90") != std::string::npos;
  CHECK(named);
}

TEST_CASE("a leader started again takes the state of the first member that outlived it") {
  std::mutex mu;
  std::vector<RegionState> got(3);
  test::run_ranks<GlooCommunicator>(3, "resync-root", [&](GlooCommunicator& comm) {
    // The leader's own state is empty: it has none of its own yet.
    auto mine = comm.rank() == 0 ? state_of(0, 1000, 0) : state_of(comm.rank(), 1000, 4);
    auto s = resync_from(comm, 1, std::move(mine));
    std::lock_guard lock(mu);
    got[comm.rank()] = std::move(s);
  });
  const auto source = state_of(1, 1000, 4);
  REQUIRE(source.at.merges.size() == 1);
  for (const auto& s : got) {
    CHECK(s.at == source.at);  // the merges its calendar has due too
    CHECK(s.state.params == source.state.params);
    CHECK(s.state.optimizer_m == source.state.optimizer_m);
    CHECK(s.state.guard_losses == source.state.guard_losses);
  }
}

TEST_CASE("a restarted worker takes the merges its leader's exchange calendar has due") {
  std::mutex mu;
  std::vector<RegionState> got(2);
  test::run_ranks<GlooCommunicator>(2, "resync-merges", [&](GlooCommunicator& comm) {
    // The leader has three merges due (steps past 2^40: all 64 bits go); the joiner, just
    // started, none: without the leader's it would skip their broadcasts.
    auto s = resync_from(comm, 0, state_of(comm.rank() == 0 ? 3 : 0, 100, 1));
    std::lock_guard lock(mu);
    got[comm.rank()] = std::move(s);
  });
  const auto source = state_of(3, 100, 1);
  REQUIRE(source.at.merges.size() == 3);
  for (const auto& s : got) CHECK(s.at.merges == source.at.merges);
}
