// The overlap modes and the streaming schedule against a closed-form toy: regions minimising
// f_r(x) = (x - c_r)^2 / 2 by gradient descent, a server averaging their outer gradients, and
// the one-round-late merge of worker/leader/overlap_merge.hpp. The sequences below were computed by
// hand.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "worker/leader/overlap_merge.hpp"
#include "worker/leader/streaming_sync.hpp"

using namespace geotrain;
using namespace geotrain::worker;

namespace {

// R regions of one parameter each, overlapped by one round (delay = H), outer optimizer on a
// fake server: every region pushes at the same boundary; the global result of round b arrives
// at boundary b + 1.
struct Toy {
  std::vector<float> optima;  // c_r
  float alpha = 0.5f;         // inner learning rate
  uint32_t local_steps = 1;
  OuterStepConfig outer;

  // Runs `rounds` rounds; returns the regions' x after each boundary (rows) and the global
  // value after each round.
  struct Trace {
    std::vector<std::vector<float>> x;  // [boundary][region]
    std::vector<float> global;          // [round]
  };
  Trace run(OverlapMode mode, uint32_t rounds, float x0 = 0.0f) const {
    const size_t regions = optima.size();
    std::vector<float> x(regions, x0);
    float theta = x0, momentum = 0;
    std::vector<OverlapMerge> merges;
    for (size_t r = 0; r < regions; ++r)
      merges.emplace_back(mode, outer, static_cast<uint32_t>(regions), std::vector<float>{x0});
    std::vector<float> in_flight;  // the pushed values of the round on the wire
    Trace trace;
    for (uint32_t b = 1; b <= rounds + 1; ++b) {
      if (b <= rounds)
        for (size_t r = 0; r < regions; ++r)
          for (uint32_t h = 0; h < local_steps; ++h) x[r] -= alpha * (x[r] - optima[r]);
      // Boundary b: merge round b - 1, then push round b.
      if (!in_flight.empty()) {
        float d = 0;  // the server: the average outer gradient, then its optimizer
        for (size_t r = 0; r < regions; ++r) d += (in_flight[r] - theta) / float(regions);
        momentum = outer.momentum * momentum + d;
        theta += outer.momentum == 0 ? outer.lr * d
                                     : (outer.nesterov ? outer.lr * (d + outer.momentum * momentum)
                                                       : outer.lr * momentum);
        trace.global.push_back(theta);
        for (size_t r = 0; r < regions; ++r) {
          std::vector<float> xv{x[r]};
          merges[r].merge(0, 1, xv, std::vector<float>{theta});
          x[r] = xv[0];
        }
        in_flight.clear();
      }
      if (b > rounds) break;
      for (size_t r = 0; r < regions; ++r) {
        std::vector<float> xv{x[r]}, push(1);
        merges[r].start(0, 1, xv, push);
        x[r] = xv[0];
        in_flight.push_back(push[0]);
      }
      trace.x.push_back(x);
    }
    return trace;
  }
};

}  // namespace

TEST_CASE("with one region and a plain outer step, every overlap mode is the synchronous path") {
  // One region: the average is its own outer gradient, so a proxy of q (carry) or of q / 1
  // through an outer step of lr 1 (eager, delayed) is exactly what the server will do.
  Toy toy{{3.0f}, 0.25f, 4, {}};
  for (auto mode : {OverlapMode::carry, OverlapMode::eager, OverlapMode::delayed}) {
    CAPTURE(overlap_mode_name(mode));
    const auto trace = toy.run(mode, 6);
    for (size_t b = 0; b < trace.global.size(); ++b) {
      // Synchronous: x_b = c + (1 - alpha)^(H b) (x_0 - c).
      const double expected = 3.0 - 3.0 * std::pow(0.75, 4.0 * double(b + 1));
      CHECK(trace.global[b] == doctest::Approx(expected).epsilon(1e-6));
    }
  }
}

TEST_CASE("eager overlap applies the region's own share of its outer gradient at once") {
  // Two regions, c = 0 and 4, alpha = 0.5, H = 1, outer SGD lr 1 (computed by hand).
  // Boundary 1: q = (0, 2) -> x = 0 + q / 2 = (0, 1); the server's round 1: 1.
  // Boundary 2: x before = (0, 2.5); merge: x = 1 + (0, 1.5) = (1, 2.5);
  //             push q = (0, 1.5) -> x = 1 + q / 2 = (1, 1.75); round 2: 1.75.
  // Boundary 3: x before = (0.5, 2.875); merge: (1.25, 2.875); q = (-0.5, 1.125)
  //             -> x = (1.5, 2.3125); round 3: 2.0625.
  Toy toy{{0.0f, 4.0f}, 0.5f, 1, {}};
  const auto t = toy.run(OverlapMode::eager, 3);
  REQUIRE(t.x.size() == 3);
  CHECK(t.x[0][0] == 0.0f);
  CHECK(t.x[0][1] == 1.0f);
  CHECK(t.x[1][0] == 1.0f);
  CHECK(t.x[1][1] == 1.75f);
  CHECK(t.x[2][0] == 1.5f);
  CHECK(t.x[2][1] == 2.3125f);
  REQUIRE(t.global.size() == 3);
  CHECK(t.global[0] == 1.0f);
  CHECK(t.global[1] == 1.75f);
  CHECK(t.global[2] == 2.0625f);
}

TEST_CASE("carry overlap keeps the region's whole progress until the global result replaces it") {
  // The same toy. Boundary 1: x = (0, 2) unchanged; round 1: 1.
  // Boundary 2: x before = (0, 3); merge: 1 + (0, 1) = (1, 2); round 2: 1.5.
  // Boundary 3: x before = (0.5, 3); merge: 1.5 + (-0.5, 1) = (1, 2.5); round 3: 1.75.
  Toy toy{{0.0f, 4.0f}, 0.5f, 1, {}};
  const auto t = toy.run(OverlapMode::carry, 3);
  CHECK(t.x[0] == std::vector<float>{0.0f, 2.0f});
  CHECK(t.x[1] == std::vector<float>{1.0f, 2.0f});
  CHECK(t.x[2] == std::vector<float>{1.0f, 2.5f});
  CHECK(t.global == std::vector<float>{1.0f, 1.5f, 1.75f});
}

TEST_CASE("delayed overlap adds the other regions' last share to the eager proxy") {
  // Boundary 1 is eager's (no round merged yet): x = (0, 1).
  // Boundary 2: merge round 1 (d = 1; own pushes 0 and 2, so the others' shares are 1 and 0):
  //   x = (1, 2.5); q = (0, 1.5); x = 1 + (0 + 1, 0.75 + 0) = (2, 1.75); round 2: 1.75.
  Toy toy{{0.0f, 4.0f}, 0.5f, 1, {}};
  const auto t = toy.run(OverlapMode::delayed, 2);
  CHECK(t.x[0] == std::vector<float>{0.0f, 1.0f});
  CHECK(t.x[1] == std::vector<float>{2.0f, 1.75f});
  CHECK(t.global == std::vector<float>{1.0f, 1.75f});
}

TEST_CASE("every overlap mode converges to the optimum of the regions' sum") {
  for (bool nesterov : {false, true}) {
    Toy toy{{0.0f, 4.0f, 5.0f}, 0.1f, 4, {}};
    if (nesterov) toy.outer = {0.7f, 0.5f, true};
    for (auto mode : {OverlapMode::carry, OverlapMode::eager, OverlapMode::delayed}) {
      CAPTURE(nesterov);
      CAPTURE(overlap_mode_name(mode));
      const auto t = toy.run(mode, 200);
      CHECK(t.global.back() == doctest::Approx(3.0).epsilon(1e-3));
    }
  }
}

TEST_CASE("the outer step model recovers the servers' Nesterov momentum from their values") {
  OuterStepConfig c{0.7f, 0.9f, true};
  OuterStepModel model(c, 2);
  // A server applying Nesterov to a known sequence of average outer gradients.
  const std::vector<std::vector<float>> ds{{1.0f, -2.0f}, {0.5f, 0.25f}, {-1.0f, 3.0f}};
  std::vector<float> m{0, 0};
  for (const auto& d : ds) {
    std::vector<float> change(2), predicted(2), recovered(2);
    model.predict(0, d, predicted);
    for (int i = 0; i < 2; ++i) {
      m[i] = c.momentum * m[i] + d[i];
      change[i] = c.lr * (d[i] + c.momentum * m[i]);
    }
    CHECK(predicted[0] == doctest::Approx(change[0]).epsilon(1e-6));
    CHECK(predicted[1] == doctest::Approx(change[1]).epsilon(1e-6));
    model.observe(0, change, recovered);
    CHECK(recovered[0] == doctest::Approx(d[0]).epsilon(1e-5));
    CHECK(recovered[1] == doctest::Approx(d[1]).epsilon(1e-5));
  }
}

TEST_CASE("a start and a merge in one pass equal the outer step model's span steps, bit for bit") {
  // The reference is the rule in passes over the whole range, as the header states it (the
  // OuterStepModel's span calls); OverlapMerge fuses them into one pass per start and merge.
  const size_t n = 5'003;
  const uint32_t regions = 3;
  for (OverlapMode mode : {OverlapMode::carry, OverlapMode::eager, OverlapMode::delayed}) {
    for (float momentum : {0.0f, 0.9f}) {
      for (bool nesterov : {false, true}) {
        CAPTURE(overlap_mode_name(mode));
        CAPTURE(momentum);
        CAPTURE(nesterov);
        const OuterStepConfig outer{0.7f, momentum, nesterov};
        std::vector<float> g0(n);
        for (size_t i = 0; i < n; ++i) g0[i] = std::sin(0.37f * static_cast<float>(i));
        OverlapMerge merge(mode, outer, regions, g0);
        OuterStepModel model(outer, mode == OverlapMode::carry ? 0 : n);
        std::vector<float> global = g0, after(n), last(n, 0.0f), others(n, 0.0f), d(n), step(n);
        std::vector<float> x(n), want_x(n), push(n), returned(n);
        for (int round = 1; round <= 4; ++round) {
          for (size_t i = 0; i < n; ++i)
            x[i] = global[i] + 0.01f * std::cos(static_cast<float>(i) * static_cast<float>(round));
          want_x = x;
          merge.start(0, n, x, push);
          CHECK(push == want_x);  // the push is the local values
          if (mode != OverlapMode::carry) {
            for (size_t i = 0; i < n; ++i) {
              last[i] = want_x[i] - global[i];
              d[i] = (want_x[i] - global[i]) * (1.0f / static_cast<float>(regions));
              if (mode == OverlapMode::delayed) d[i] += others[i];
            }
            model.predict(0, d, step);
            for (size_t i = 0; i < n; ++i) want_x[i] = global[i] + step[i];
          }
          CHECK(std::memcmp(x.data(), want_x.data(), 4 * n) == 0);
          after = want_x;
          for (size_t i = 0; i < n; ++i) {
            x[i] += 0.001f * static_cast<float>(round);  // progress while the exchange is out
            returned[i] =
                global[i] + 0.02f * std::sin(static_cast<float>(i) + static_cast<float>(round));
          }
          want_x = x;
          merge.merge(0, n, x, returned);
          if (mode != OverlapMode::carry) {
            for (size_t i = 0; i < n; ++i) step[i] = returned[i] - global[i];
            model.observe(0, step, d);
            if (mode == OverlapMode::delayed)
              for (size_t i = 0; i < n; ++i)
                others[i] = d[i] - last[i] * (1.0f / static_cast<float>(regions));
          }
          for (size_t i = 0; i < n; ++i) want_x[i] = returned[i] + (want_x[i] - after[i]);
          CHECK(std::memcmp(x.data(), want_x.data(), 4 * n) == 0);
          global = returned;
        }
      }
    }
  }
}

TEST_CASE("worker.overlap names a mode, and a wrong one is refused by name") {
  CHECK(parse_overlap_mode("false") == OverlapMode::off);
  CHECK(parse_overlap_mode("true") == OverlapMode::carry);
  CHECK(parse_overlap_mode("eager") == OverlapMode::eager);
  CHECK(parse_overlap_mode("delayed") == OverlapMode::delayed);
  CHECK_THROWS_WITH_AS(parse_overlap_mode("later"), doctest::Contains("'later'"), InputError);
}

TEST_CASE("fragment p of P syncs every H steps, staggered by H / P, the last at round ends") {
  // H = 8, P = 4: fragment 3 at 8, 16, ...; fragment 2 at 6, 14; 1 at 4, 12; 0 at 2, 10.
  std::vector<std::vector<uint64_t>> due(4);
  for (uint64_t k = 1; k <= 16; ++k)
    for (uint32_t p = 0; p < 4; ++p)
      if (FragmentSchedule{8, 4, 0}.due(k, p)) due[p].push_back(k);
  CHECK(due[0] == std::vector<uint64_t>{2, 10});
  CHECK(due[1] == std::vector<uint64_t>{4, 12});
  CHECK(due[2] == std::vector<uint64_t>{6, 14});
  CHECK(due[3] == std::vector<uint64_t>{8, 16});
  // One fragment: every round boundary, as the synchronous path.
  for (uint64_t k = 1; k <= 9; ++k) CHECK(FragmentSchedule{3, 1, 0}.due(k, 0) == (k % 3 == 0));
}

TEST_CASE("the parameters change after a fragment's push and after its merge, delay steps later") {
  // H = 8, P = 4, delay 1: pushes at 2, 4, 6, 8, merges one step later.
  const FragmentSchedule s{8, 4, 1};
  std::vector<uint64_t> changes;
  for (uint64_t k = 1; k <= 10; ++k)
    if (s.changes_after(k)) changes.push_back(k);
  CHECK(changes == std::vector<uint64_t>{2, 3, 4, 5, 6, 7, 8, 9, 10});
  // One fragment merged a round late (carry): after every boundary only.
  const FragmentSchedule carry{4, 1, 4};
  for (uint64_t k = 1; k <= 12; ++k) CHECK(carry.changes_after(k) == (k % 4 == 0));
  // The default delay: 0 without overlap, H / P with it; a written one wins.
  CHECK(FragmentSchedule::merge_delay(OverlapMode::off, 8, 4, std::nullopt) == 0);
  CHECK(FragmentSchedule::merge_delay(OverlapMode::eager, 8, 4, std::nullopt) == 2);
  CHECK(FragmentSchedule::merge_delay(OverlapMode::carry, 8, 1, std::nullopt) == 8);
  CHECK(FragmentSchedule::merge_delay(OverlapMode::eager, 8, 4, 3u) == 3);
}

TEST_CASE("in rounds of H steps, a step's position gives the same schedule as its number") {
  for (uint32_t h : {1u, 3u, 8u})
    for (uint32_t parts = 1; parts <= h; ++parts)
      for (uint32_t delay : {0u, 1u, h / parts, h}) {
        const FragmentSchedule s{h, parts, delay};
        MergeCalendar calendar(s);
        for (uint64_t k = 1; k <= 5 * h; ++k) {
          const auto at = s.position(k);
          CHECK(at.round_end() == (k % h == 0));
          for (uint32_t p = 0; p < parts; ++p) CHECK(s.due(at, p) == s.due(k, p));
          CHECK(calendar.changes_after(at) == s.changes_after(k));
        }
      }
}

TEST_CASE("a round of k steps pushes the fragments at the same fractions of it as a round of H") {
  const FragmentSchedule s{8, 4, 1};
  const auto due_steps = [&](uint32_t k) {
    std::vector<std::vector<uint32_t>> due(4);
    for (uint32_t h = 1; h <= k; ++h)
      for (uint32_t p = 0; p < 4; ++p)
        if (s.due(StepPosition{h, h, k}, p)) due[p].push_back(h);
    return due;
  };
  // 16 steps (a fast region): every fourth step; 4 steps: one a step; 2 steps: two a step; the
  // last fragment always at the round's end; every fragment once a round.
  CHECK(due_steps(16) == std::vector<std::vector<uint32_t>>{{4}, {8}, {12}, {16}});
  CHECK(due_steps(4) == std::vector<std::vector<uint32_t>>{{1}, {2}, {3}, {4}});
  CHECK(due_steps(2) == std::vector<std::vector<uint32_t>>{{1}, {1}, {2}, {2}});
  CHECK(due_steps(1) == std::vector<std::vector<uint32_t>>{{1}, {1}, {1}, {1}});
}

TEST_CASE("with overlap a round late, a short round merges its fragment before the next push") {
  // H = 8, one fragment merged 8 steps after its push; rounds of 3 steps (a slow region): the
  // push after step 3 is merged after step 6, when the fragment is due again, not after step 11.
  const FragmentSchedule s{8, 1, 8};
  MergeCalendar calendar(s);
  std::vector<uint64_t> changes;
  uint64_t step = 0;
  for (int round = 0; round < 3; ++round)
    for (uint32_t h = 1; h <= 3; ++h)
      if (calendar.changes_after({++step, h, 3})) changes.push_back(step);
  CHECK(changes == std::vector<uint64_t>{3, 6, 9});
  // And a merge whose delay ends inside the next round happens there (delay 1 over a boundary).
  MergeCalendar one({8, 2, 1});
  std::vector<uint64_t> after;
  step = 0;
  for (uint32_t k : {2u, 5u})
    for (uint32_t h = 1; h <= k; ++h)
      if (one.changes_after({++step, h, k})) after.push_back(step);
  // Round 1 (2 steps): fragment 0 at 1, 1 at 2; merges at 2 and 3. Round 2 (5 steps): fragment 0
  // at step 2 + 5 - 2 = 5, merged at 6; fragment 1 at 7.
  CHECK(after == std::vector<uint64_t>{1, 2, 3, 5, 6, 7});
}
