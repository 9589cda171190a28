// StreamingSync: when a region leader exchanges which part of the model, and how the result is
// merged (docs/training.md, "Overlap modes" and "Streaming fragments").
//
// The parameters are cut into P fragments (RegionSync::fragment_ranges; P = 1: the whole table).
// Fragment p is due every H local steps, at steps k with (k + (P - 1 - p) * H / P) % H == 0,
// so the last fragment is due at every round boundary, as the whole table is without streaming,
// and only 1/P of the model is on the WAN at once. With the critical tensors kept out of streaming
// (SyncConfig::critical_fragment), their fragment P is exchanged at every round boundary, blocking,
// and takes the global values at once, whatever the delay and mode (with a background thread, it
// queues behind the exchanges already queued, in the same order in every region). A due fragment
// starts its exchange (push its progress, pull the new global values of its shards) and is merged
// `delay` steps later (worker.fragment_delay; H for overlap without fragments, i.e. one round
// late):
//   - delay 0: the exchange blocks, and the fragment takes the global values (synchronous);
//   - delay > 0: the exchange runs on a background thread while the workers go on training, and
//     the merge follows the overlap mode (worker/leader/overlap_merge.hpp).
// With config.shard_wait (RegionSync: deferred shards), a background exchange may come back with
// shards still on the WAN: they are neither merged nor started again until an exchange of their
// fragment brings their result, then merged by the same rule (the progress since their start is
// kept). At the end, finish() merges what is in flight, waits for deferred shards (settle) and
// exchanges, blocking, every fragment whose last push is older than the last step or that had
// deferred shards, so that every region ends on the global values. A run that flushes leaves
// the deferred shards to flush() instead (RegionSync::flush sends them last).
//
// Owns its thread (joined on destruction) and per-exchange buffers; borrows the RegionSync,
// which nobody else may use while this object lives. The thread keeps the servers' heartbeats
// going whenever no exchange is under way, in every mode: a synchronous region whose steps,
// evaluations or checkpoints take longer than the servers' dead_after must not be declared dead
// for it. The RegionSync is used under sync_mutex_ (an exchange on either thread, or the
// heartbeat). after_step() and finish() are for one caller thread. An exception in a background
// exchange is rethrown by the next after_step() or finish().
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "worker/leader/fragment_schedule.hpp"
#include "worker/leader/leader_params.hpp"
#include "worker/leader/overlap_merge.hpp"
#include "worker/leader/region_sync.hpp"

namespace geotrain::worker {

struct StreamingConfig {
  uint32_t local_steps = 1;  // H
  uint32_t fragments = 1;    // P (must match the RegionSync's)
  uint32_t delay = 0;        // steps from a fragment's push to its merge; 0: blocking, <= H
  // worker.fragment_delay as written (nullopt: the default, merge_delay()), so that the delay
  // follows P when the servers' fragment count replaces the config's (LeaderSession::connect).
  std::optional<uint32_t> written_delay;
  FragmentSchedule schedule() const { return {local_steps, fragments, delay}; }
  OverlapMode mode = OverlapMode::off;  // the merge rule when delay > 0
  OuterStepConfig outer;                // the servers' outer optimizer (eager / delayed)
  uint32_t regions = 1;                 // R
  // The samples (tokens) one local step of the region trains on; > 0: each push carries the
  // steps since its fragment's last push times this (the servers' token-weighted merge, for
  // rounds of any length); 0: SyncConfig::tokens_per_round.
  uint64_t tokens_per_step = 0;
  // Parameters on a device (worker/leader/leader_params.hpp): when set, and the exchanges run in
  // the background, the parameters and the overlap rule live where this makes them, and callers
  // pass an empty span until finish() (which takes them to the host). Empty: on the host.
  MakeLeaderParams device_params;
};

// How a run ends after StreamingSync::finish(): with the flush (the global model), or without it
// (a run stopped before its last round; the Python API's finish() without flush()).
enum class RunEnd { flush, no_flush };

class StreamingSync {
 public:
  // `sync` must be connected; its base() is where every region starts. InputError for a delay
  // beyond H, or fragments not matching the servers'.
  StreamingSync(RegionSync& sync, StreamingConfig config);
  ~StreamingSync();
  StreamingSync(const StreamingSync&) = delete;
  StreamingSync& operator=(const StreamingSync&) = delete;

  // After local step `step` (1-based over the whole run: (round - 1) * H + h + 1): merges the
  // exchanges due at this step (waiting for them if they are still on the WAN), then starts the
  // fragments due. May change `params`: empty when params_on_device(), whose are changed
  // instead. Returns the reports of the exchanges merged.
  std::vector<RoundReport> after_step(uint64_t step, FloatSpan params);
  // The same for rounds of any length (fragment_schedule.hpp): the fragments due at `at`, the
  // critical one at its round's end; a fragment due again before its merge is merged first.
  std::vector<RoundReport> after_step(const StepPosition& at, FloatSpan params);

  // The end of training after step `last_step`: see above. Returns the reports merged. With
  // RunEnd::flush, deferred shards whose replies have not come are left to flush() (which must
  // follow): they are merged there, after this region's other shards are flushed. With the
  // parameters on a device, they come to `params` first (a full table), and stay on the host.
  std::vector<RoundReport> finish(uint64_t last_step, FloatSpan params,
                                  RunEnd end = RunEnd::no_flush);
  // After finish(..., RunEnd::flush): RegionSync::flush, the deferred shards merged by the
  // overlap rule once they settle. base() is then the global model.
  FlushReport flush(FloatSpan params);

  // The leader's own work at its boundaries since the last call, in seconds (the waits for
  // exchanges to come back are RoundReport::merge_wait_seconds): `start`, reading the parameters
  // into pushes (the overlap rule's start pass and its copies); `merge`, taking results into the
  // parameters; `commit`, the end of a boundary's work (on a device: its weights refreshed, its
  // stream synchronised). On the host or the device alike, so that the two compare.
  struct BoundaryTimes {
    double start = 0, merge = 0, commit = 0;
  };
  BoundaryTimes take_boundary_times() { return std::exchange(boundary_, BoundaryTimes{}); }

  bool background() const { return config_.delay > 0; }
  // The parameters and the overlap rule are on a device (StreamingConfig::device_params), until
  // finish().
  bool params_on_device() const { return device_ != nullptr; }

  // The RegionSync's uplink residuals, read between exchanges (not while a heartbeat is out).
  // Without overlap only: a background exchange may be changing them (GT_ASSERT).
  std::map<std::string, std::vector<float>> residuals();

 private:
  struct Job {
    uint32_t fragment = 0;
    uint64_t merge_at = 0;  // the step after which it is merged
    bool defer = true;      // its shards may be deferred (not the blocking critical fragment)
    uint64_t tokens = 0;    // what its push stands for (StreamingConfig::tokens_per_step)
    HostTable push;         // the values pushed (only the fragment's ranges are read)
    // Parameters on a device only: the global values after the exchange (the fragment's ranges),
    // copied from the region's base by the exchange thread into page-locked memory, from which
    // the merge's copy to the device runs at the bus's speed (from base itself, pageable, the
    // driver stages it at a fraction of that, on the training thread). Empty on the host, whose
    // merge reads base (global()).
    HostTable staging;
    std::optional<RoundReport> report;
    std::exception_ptr error;
    bool done = false;
  };

  void loop(std::stop_token stop);
  // The parameters a call works on: the device's, or the host's bound to `params`.
  LeaderParams& local(FloatSpan params);
  RoundReport wait_and_merge(Job& job, LeaderParams& params);
  // A blocking exchange of the host parameters (without overlap, and finish()'s last exchanges).
  RoundReport run_blocking(uint32_t fragment, uint64_t tokens);
  // A blocking exchange on the background thread, behind the queued ones, taking the global
  // values (the critical fragment while other fragments stream).
  RoundReport run_queued(uint32_t fragment, LeaderParams& params, uint64_t tokens);
  // The tokens of fragment's push after `step`: those of the steps since its last push (0 without
  // StreamingConfig::tokens_per_step).
  uint64_t take_tokens(uint32_t fragment, uint64_t step);
  void copy_ranges(uint32_t fragment, ConstFloatSpan from, FloatSpan to) const;
  // The global values `job`'s merge takes, on its fragment's ranges: the region's base (one copy
  // of the region's view of the global model: a fragment's ranges of it change only in that
  // fragment's exchanges, on the exchange thread before the job is done, and in take_late() on
  // the caller's, so the merge reads them there while another fragment's exchange writes its
  // own), or the job's staging copy on a device.
  ConstFloatSpan global(const Job& job) const;
  // The deferred shards of `job`'s fragment whose replies have come (RegionSync::take_ready):
  // their global values in base (and the job's staging), their ranges out of deferred_. None
  // while another fragment's exchange holds the connection (they wait for a later look).
  std::vector<ElementRange> take_late(Job& job);
  // Before `job`'s fragment starts: its deferred shards whose replies came since its last merge
  // are merged now and start with it, instead of sitting out this round too (their servers told
  // absent) and coming back a round later.
  void merge_late(Job& job, LeaderParams& params);
  // A job with its full-table buffers (push; staging on a device), spare ones when there are (a
  // large model's are hundreds of megabytes: allocating and zeroing them at every start was time
  // the steps waited for); finished() gives a merged job's buffers back. Only the fragment's
  // ranges of a buffer are ever written or read, so what a spare held before does not matter.
  // New buffers come from the parameters' LeaderParams (HostTable: page-locked for a device).
  std::shared_ptr<Job> new_job(uint32_t fragment);
  void finished(Job& job);

  RegionSync& sync_;
  StreamingConfig config_;
  std::vector<std::vector<ElementRange>> ranges_;  // per fragment
  std::vector<uint64_t> last_start_;               // per fragment: the step of its last push
  // Per fragment: the step its last push's tokens reach (take_tokens); empty before the first
  // after_step(), which starts every fragment at the step before it.
  std::vector<uint64_t> pushed_at_;
  // Per fragment: the ranges of its deferred shards (RegionSync) after its last merged exchange;
  // neither merged nor started until an exchange merges them.
  std::vector<std::vector<ElementRange>> deferred_;
  std::vector<uint32_t> late_;  // per fragment: shards merged late at its start (merge_late)
  HostLeaderParams host_;       // the overlap rule when delay > 0 (on the host)
  std::unique_ptr<LeaderParams> device_;  // the parameters and rule on a device, until finish()
  BoundaryTimes boundary_;                // since take_boundary_times() (the caller's thread)
  std::deque<std::shared_ptr<Job>> in_flight_;  // started, not merged; oldest first
  std::mutex sync_mutex_;  // held while sync_ is used: an exchange, or the idle heartbeat
  std::mutex mutex_;       // the queue and the jobs' results
  std::condition_variable_any wake_;
  std::deque<std::shared_ptr<Job>> queue_;  // for the thread, oldest first
  std::vector<HostTable> spare_;            // merged jobs' buffers (the caller's thread only)
  std::jthread thread_;
};

}  // namespace geotrain::worker
