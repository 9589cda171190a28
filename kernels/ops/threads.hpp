// Threads for the CPU model ops (kernels/ops/*): how many the ops may use, the pool that runs
// their parallel loops, and OpenBLAS's share.
//
// set_threads(n) is the one knob: the ops split their work over the calling thread plus n - 1
// pool workers, and OpenBLAS gets n threads for GEMMs that callers run outside the ops (the MLP's
// layers). Both settings are process-wide, as OpenBLAS's own is: a process is meant to own its
// cores (one trainer process per machine), so set it once at start-up, never while ops run.
//
// Determinism: every op cuts its work into tasks that depend on the shapes only, never on n; each
// task writes its own outputs (parameter gradients are reduced over rows in a fixed order inside
// one task), so results are bit-identical whatever n and whichever thread runs which task.
//
// Why a pool and not OpenMP: an OpenMP team ends every loop at a barrier where the caller waits,
// spinning, for each thread to check in. With another process or our own communication threads
// on a 2-core machine, a descheduled team thread stalls every op for a scheduler slice (measured
// on 2 cores during a concurrent build: gpt-tiny at 2 OpenMP threads took 2.5-6x as long per step
// as at 1 thread; with this pool, at most as long). Here tasks are claimed one at a time, the
// caller runs whatever nobody has claimed and waits only for tasks already running; idle workers
// spin briefly, then sleep on a condition variable.
//
// OpenBLAS inside tasks runs single-threaded (BlasSingleThreaded): a pthreads OpenBLAS (Debian's
// libopenblas0-pthread) called from two threads at once with threads of its own serialises the
// calls on its server lock and oversubscribes the cores with its spinning workers.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace geotrain::kernels::cpu {

// Threads the ops (and OpenBLAS, outside the ops) may use; InputError when threads < 1.
void set_threads(int threads);
// The current setting (1 until set_threads is called).
int threads();

// Runs task(i) for every i in [0, tasks) on the calling thread and the pool, and returns when all
// have finished. Tasks must write disjoint memory and must not throw. Blocks. Thread-safe: when the
// pool is busy (another thread's loop, or a task calling parallel_for) the tasks run on the caller,
// in order.
void parallel_for(size_t tasks, const std::function<void(size_t task)>& task);

// Subnormal floats flushed to zero, as results (FTZ) and as operands (DAZ), on the calling thread
// and on the threads it starts afterwards (they inherit its floating-point environment: the pool
// of set_threads when called first, OpenBLAS's threads when set_threads adds them). Training sets
// it before set_threads: a classifier that has grown confident has a softmax gradient that is
// mostly subnormal (exp of margins past 87), and a GEMM on subnormal operands ran 64x slower here
// than on normal ones (OpenBLAS, SkylakeX); the demo's MLP stepped 3x slower once its loss fell
// below 1e-3. A subnormal is below 1.2e-38: flushing it changes no value a model can tell from
// zero. x86-64 only; elsewhere it does nothing and returns false. Returns flushing_denormals().
bool flush_denormals();
// Whether the calling thread flushes subnormals to zero (FTZ and DAZ both on).
bool flushing_denormals();

// The BLAS library and the kernels it chose for this CPU, as OpenBLAS says
// ("OpenBLAS 0.3.21 ... DYNAMIC_ARCH ... Cooperlake ..."): each kernel set sums in its own order,
// so runs on two CPUs differ in their bits unless OPENBLAS_CORETYPE names the same set on both.
std::string blas_config();

// RAII: OpenBLAS runs single-threaded in its callers' threads for this scope, then gets back the
// thread count it had. For ops that call cblas_* from inside parallel_for tasks.
class BlasSingleThreaded {
 public:
  BlasSingleThreaded();
  ~BlasSingleThreaded();
  BlasSingleThreaded(const BlasSingleThreaded&) = delete;
  BlasSingleThreaded& operator=(const BlasSingleThreaded&) = delete;

 private:
  int saved_ = 1;
};

}  // namespace geotrain::kernels::cpu
