// Time-budgeted rounds (worker/training/round_budget.hpp): a round's step count is the budget
// over the region's measured pace, the fraction carried to the next round, between 1 and the
// most steps a round may take.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "worker/training/round_budget.hpp"

using namespace geotrain::worker;

namespace {

// The counts of `rounds` rounds whose steps all take `pace_s`.
std::vector<uint32_t> plan_rounds(RoundBudget& b, double pace_s, int rounds) {
  std::vector<uint32_t> out;
  for (int r = 0; r < rounds; ++r) {
    out.push_back(b.plan());
    for (uint32_t k = 0; k < out.back(); ++k) b.record_step(pace_s);
  }
  return out;
}

}  // namespace

TEST_CASE("a region at a third of the budget's pace takes 8/3 steps a round: 3, 2, 3, ...") {
  RoundBudget slow(2.4, 16, 8, 0.9);  // eight 300 ms steps' budget, 900 ms steps
  CHECK(plan_rounds(slow, 0.9, 6) == std::vector<uint32_t>{3, 2, 3, 3, 2, 3});
  // At the budget's own pace: H every round; a hair slower (a step's overheads) too, until the
  // shortfall adds up to half a step.
  RoundBudget fast(2.4, 16, 8, 0.3);
  CHECK(plan_rounds(fast, 0.3, 4) == std::vector<uint32_t>{8, 8, 8, 8});
  RoundBudget hair(2.4, 16, 8, 0.301);  // 7.97 steps a round
  const auto counts = plan_rounds(hair, 0.301, 20);
  CHECK(std::count(counts.begin(), counts.end(), 8u) == 19);
  CHECK(counts[18] == 7);  // 19 x 0.027 > 0.5 steps short
}

TEST_CASE("without a known pace the first round takes its given count, then the measured pace") {
  RoundBudget b(1.0, 10, 4);
  CHECK(b.plan() == 4);
  CHECK(b.pace_s() == 0);
  for (int k = 0; k < 4; ++k) b.record_step(0.25);
  CHECK(b.plan() == 4);
  CHECK(b.pace_s() == doctest::Approx(0.25));
  for (int k = 0; k < 4; ++k) b.record_step(0.1);
  CHECK(b.plan() == 10);  // 1.0 / 0.1
}

TEST_CASE("a slowdown and its recovery are planned at the new pace within two rounds") {
  RoundBudget b(2.4, 16, 8, 0.3);
  CHECK(plan_rounds(b, 0.3, 2) == std::vector<uint32_t>{8, 8});
  // The region becomes 3x slower halfway through a round of 8: that round's mean pace is 0.6 s.
  CHECK(b.plan() == 8);
  for (int k = 0; k < 4; ++k) b.record_step(0.3);
  for (int k = 0; k < 4; ++k) b.record_step(0.9);
  CHECK(b.plan() == 4);  // partly adapted
  for (int k = 0; k < 4; ++k) b.record_step(0.9);
  const auto slow = plan_rounds(b, 0.9, 3);  // fully adapted: 8/3 a round
  CHECK(slow[0] + slow[1] + slow[2] == 8);
  // Recovered: the first round is planned at the slow round's pace before it, the next at the
  // fast pace again.
  CHECK(plan_rounds(b, 0.3, 2) == std::vector<uint32_t>{3, 8});
}

TEST_CASE("a round takes at least one step and at most max_steps, and saves at most half a step") {
  RoundBudget crawl(1.0, 16, 8, 5.0);  // one step is five budgets long
  CHECK(plan_rounds(crawl, 5.0, 3) == std::vector<uint32_t>{1, 1, 1});
  RoundBudget sprint(1.0, 6, 4, 0.01);  // a hundred steps would fit
  CHECK(plan_rounds(sprint, 0.01, 2) == std::vector<uint32_t>{6, 6});
  // Back to a pace of 4 steps a round (after one round planned at the old pace): the capped
  // rounds saved less than half a step of credit.
  CHECK(plan_rounds(sprint, 0.25, 2) == std::vector<uint32_t>{6, 4});
}
