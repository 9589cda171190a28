// Emulated compute speed (worker/training/emulated_step.hpp): a step lasts its emulated time,
// a slowdown multiplies it inside its window, and a step whose real work took longer is an
// overrun.
#include <doctest/doctest.h>

#include "worker/training/emulated_step.hpp"

using namespace geotrain::worker;

TEST_CASE("a step faster than its emulated time waits for the rest of it, and is no overrun") {
  EmulatedStepTime t(300, {});
  CHECK(t.on());
  CHECK(t.pad_s(0.1, 5.0) == doctest::Approx(0.2));
  CHECK(t.pad_s(0.3, 6.0) == doctest::Approx(0.0));  // exactly on time
  CHECK(t.overruns() == 0);
}

TEST_CASE("a step whose real work overran its emulated time is counted, and does not wait") {
  EmulatedStepTime t(50, {});
  CHECK(t.pad_s(0.08, 1.0) == 0.0);
  CHECK(t.pad_s(0.02, 1.1) == doctest::Approx(0.03));
  CHECK(t.pad_s(0.051, 1.2) == 0.0);
  CHECK(t.overruns() == 2);
}

TEST_CASE("a slowdown multiplies the step time inside its window only") {
  EmulatedStepTime t(100, {{"a", 10.0, 20.0, 3.0}, {"a", 15.0, 16.0, 2.0}});
  CHECK(t.target_s(9.99) == doctest::Approx(0.1));
  CHECK(t.target_s(10.0) == doctest::Approx(0.3));
  CHECK(t.target_s(15.5) == doctest::Approx(0.6));  // overlapping windows multiply
  CHECK(t.target_s(20.0) == doctest::Approx(0.1));  // until_s is outside
  CHECK(t.pad_s(0.1, 12.0) == doctest::Approx(0.2));
}

TEST_CASE("without an emulated step time nothing waits and nothing overruns") {
  EmulatedStepTime t;
  CHECK_FALSE(t.on());
  CHECK(t.pad_s(5.0, 1.0) == 0.0);
  CHECK(t.overruns() == 0);
}
