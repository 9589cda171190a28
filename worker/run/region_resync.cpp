#include "worker/run/region_resync.hpp"

#include <array>
#include <bit>
#include <cstring>

#include "core/error.hpp"

namespace geotrain::worker {
namespace {

// The header's fields, each a 64-bit word sent as two floats' bits (a broadcast copies bytes).
enum Word : size_t {
  kRound,
  kDone,
  kSteps,
  kStepsTaken,
  kMicroBatches,
  kFragments,
  kDelay,
  kScheduleSteps,
  kOptimizerSteps,
  kGuardSkipped,
  kGuardLosses,
  kMerges,
  kParams,
  kMoments1,
  kMoments2,
  kWords
};
using Header = std::array<uint64_t, kWords>;

// A calendar holds at most one merge per fragment (1024 fragments at most): far fewer.
constexpr uint64_t kMaxMerges = uint64_t{1} << 16;

Header header_of(const RegionState& s) {
  Header h{};
  h[kRound] = s.at.round;
  h[kDone] = s.at.done;
  h[kSteps] = s.at.steps;
  h[kStepsTaken] = s.at.steps_taken;
  h[kMicroBatches] = s.at.micro_batches;
  h[kFragments] = s.at.fragments;
  h[kDelay] = s.at.delay;
  h[kScheduleSteps] = s.state.steps;
  h[kOptimizerSteps] = s.state.optimizer_steps;
  h[kGuardSkipped] = s.state.guard_skipped;
  h[kGuardLosses] = s.state.guard_losses.size();
  h[kMerges] = s.at.merges.size();
  h[kParams] = s.state.params.size();
  h[kMoments1] = s.state.optimizer_m.size();
  h[kMoments2] = s.state.optimizer_v.size();
  return h;
}

std::string size_problem(uint64_t leader, size_t mine, const char* what) {
  return leader == mine ? std::string()
                        : fmt::format("the source has {} {}, this worker {}", leader, what, mine);
}

}  // namespace

RegionState resync_from(Communicator& comm, int root, RegionState mine) {
  // The header: where the source is, and the sizes of what follows.
  Header h = header_of(mine);
  std::vector<float> words(2 * kWords);
  std::memcpy(words.data(), h.data(), sizeof(Header));
  comm.broadcast(words, root);
  std::memcpy(h.data(), words.data(), sizeof(Header));
  auto& st = mine.state;
  // Every member refuses together (a member alone would leave the others waiting in the next
  // broadcast until the group's timeout).
  std::string problem = size_problem(h[kParams], st.params.size(), "parameters");
  if (problem.empty()) problem = size_problem(h[kMoments1], st.optimizer_m.size(), "first moments");
  if (problem.empty())
    problem = size_problem(h[kMoments2], st.optimizer_v.size(), "second moments");
  if (problem.empty() && h[kGuardLosses] > (uint64_t{1} << 20))
    problem = fmt::format("a guard window of {} losses", h[kGuardLosses]);
  if (problem.empty() && h[kMerges] > kMaxMerges)
    problem = fmt::format("{} merges due, at most {}", h[kMerges], kMaxMerges);
  std::vector<float> refused{problem.empty() ? 0.0f : 1.0f};
  comm.allreduce_sum(refused);
  GT_REQUIRE(problem.empty(), "region resync: {}", problem);
  GT_REQUIRE(refused[0] == 0.0f,
             "region resync: another member's model or optimizer differs from the source's");

  // The state, in one broadcast: the guard's losses (doubles as float pairs), the merges due
  // (step and fragment, two 64-bit words each), then the parameters and both moments.
  const size_t losses = 2 * h[kGuardLosses], merges = 4 * h[kMerges];
  std::vector<float> body(losses + merges + st.params.size() + st.optimizer_m.size() +
                          st.optimizer_v.size());
  st.guard_losses.resize(h[kGuardLosses]);
  std::memcpy(body.data(), st.guard_losses.data(), st.guard_losses.size() * sizeof(double));
  std::vector<uint64_t> due(2 * h[kMerges]);
  for (size_t i = 0; i < mine.at.merges.size() && i < h[kMerges]; ++i) {
    due[2 * i] = mine.at.merges[i].step;
    due[2 * i + 1] = mine.at.merges[i].fragment;
  }
  std::memcpy(body.data() + losses, due.data(), due.size() * sizeof(uint64_t));
  auto at = body.begin() + static_cast<std::ptrdiff_t>(losses + merges);
  at = std::copy(st.params.begin(), st.params.end(), at);
  at = std::copy(st.optimizer_m.begin(), st.optimizer_m.end(), at);
  std::copy(st.optimizer_v.begin(), st.optimizer_v.end(), at);
  comm.broadcast(body, root);
  std::memcpy(st.guard_losses.data(), body.data(), st.guard_losses.size() * sizeof(double));
  std::memcpy(due.data(), body.data() + losses, due.size() * sizeof(uint64_t));
  std::vector<MergeCalendar::Merge> merged_at(h[kMerges]);
  for (size_t i = 0; i < merged_at.size(); ++i)
    merged_at[i] = {due[2 * i], static_cast<uint32_t>(due[2 * i + 1])};
  auto from = body.begin() + static_cast<std::ptrdiff_t>(losses + merges);
  for (auto* v : {&st.params, &st.optimizer_m, &st.optimizer_v}) {
    std::copy(from, from + static_cast<std::ptrdiff_t>(v->size()), v->begin());
    from += static_cast<std::ptrdiff_t>(v->size());
  }

  mine.at = {h[kRound],
             static_cast<uint32_t>(h[kDone]),
             static_cast<uint32_t>(h[kSteps]),
             h[kStepsTaken],
             h[kMicroBatches],
             static_cast<uint32_t>(h[kFragments]),
             static_cast<uint32_t>(h[kDelay]),
             std::move(merged_at)};
  st.steps = h[kScheduleSteps];
  st.optimizer_steps = h[kOptimizerSteps];
  st.guard_skipped = h[kGuardSkipped];
  return mine;
}

}  // namespace geotrain::worker
