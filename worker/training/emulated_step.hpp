// EmulatedStepTime: the compute speed of a region's emulated hardware (worker.step_time_ms and
// worker.slowdowns; docs/training.md, "Emulated compute speed"), as netsim emulates its links:
// each local step lasts at least its emulated time, measured from the step's start, so that the
// loss comes from the real model and the clock from the emulated hardware. A step whose real
// work (compute, the region's AllReduce, the optimizer) took longer than its emulated time
// cannot be slowed down to it: it is counted as an overrun, and the emulation is valid only while
// there are none (a faster step time than the machine can give).
//
// A slowdown multiplies the step time by its factor between from_s and until_s of the run (the
// time since the worker started): a brownout. Pure arithmetic; the caller sleeps. Not
// thread-safe (the worker's training thread).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace geotrain::worker {

// worker.slowdowns: one entry.
struct Slowdown {
  std::string region;
  double from_s = 0;
  double until_s = 0;
  double factor = 1;  // the step time is multiplied by it (3: three times slower)
};

class EmulatedStepTime {
 public:
  EmulatedStepTime() = default;
  // `step_ms`: this region's emulated step time (0: none, the machine's own speed); `slowdowns`:
  // this region's.
  EmulatedStepTime(double step_ms, std::vector<Slowdown> slowdowns);

  bool on() const { return step_s_ > 0; }
  // The emulated time of a step that starts `since_start_s` into the run.
  double target_s(double since_start_s) const;
  // A step started `since_start_s` into the run whose real work took `elapsed_s`: how long it
  // still has to wait (0, and an overrun counted, when its work took longer than its target).
  double pad_s(double elapsed_s, double since_start_s);
  // Steps whose real work overran their emulated time so far.
  uint64_t overruns() const { return overruns_; }

 private:
  double step_s_ = 0;
  std::vector<Slowdown> slowdowns_;
  uint64_t overruns_ = 0;
};

}  // namespace geotrain::worker
