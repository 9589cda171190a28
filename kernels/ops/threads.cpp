#include "kernels/ops/threads.hpp"

#include <cblas.h>

#if defined(__SSE2__)
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.hpp"

namespace geotrain::kernels::cpu {

namespace {

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// The pool behind parallel_for. One job at a time: `claim` packs the job's generation (high 32
// bits) with the next unclaimed task (low 32 bits), so a worker that wakes late can never claim a
// task of a newer job with an older job's function: its compare-exchange names the generation it
// read the job under. The caller finishes every task nobody else has claimed and then waits only
// for tasks in flight, never for an idle or descheduled worker to check in.
class Pool {
 public:
  explicit Pool(int workers) {
    for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { work(); });
  }
  ~Pool() {
    stop_.store(true);
    wake();
    for (std::thread& t : workers_) t.join();
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // False when the pool is busy (another thread's job, or a task calling parallel_for).
  bool run(size_t tasks, const std::function<void(size_t)>& task) {
    if (busy_.exchange(true)) return false;
    const uint64_t gen = (claim_.load() >> 32) + 1;
    task_.store(&task);
    tasks_.store(tasks);
    done_.store(0);
    claim_.store(gen << 32);  // publishes the job (seq_cst, after its fields)
    wake();
    drain(gen);
    for (int spins = 0; done_.load() != tasks; ++spins)
      if (spins < 4096)
        cpu_relax();
      else
        std::this_thread::yield();
    busy_.store(false);
    return true;
  }

 private:
  // Claims and runs tasks of job `gen` until none is left.
  void drain(uint64_t gen) {
    for (;;) {
      uint64_t c = claim_.load();
      const std::function<void(size_t)>* task = task_.load();
      const size_t tasks = tasks_.load();
      if ((c >> 32) != gen || (c & 0xffffffffu) >= tasks) return;
      if (!claim_.compare_exchange_weak(c, c + 1)) continue;
      (*task)(static_cast<size_t>(c & 0xffffffffu));
      done_.fetch_add(1);
    }
  }

  // Bumps wake_ and wakes sleeping workers. Taking sleep_mutex_ between the bump and the notify
  // means a worker that saw the old value is either not yet checking (and will see the new one)
  // or already waiting (and gets the notify): no lost wake-up.
  void wake() {
    wake_.fetch_add(1);
    { std::lock_guard lock(sleep_mutex_); }
    sleep_.notify_all();
  }

  void work() {
    uint64_t seen = 0;  // wake_'s initial value: a worker that starts late still sees every bump
    for (;;) {
      // Spin a little (the next op's job usually follows within microseconds), then sleep.
      for (int spins = 0; wake_.load() == seen && spins < 20000; ++spins) cpu_relax();
      if (wake_.load() == seen) {
        std::unique_lock lock(sleep_mutex_);
        sleep_.wait(lock, [&] { return wake_.load() != seen; });
      }
      seen = wake_.load();
      if (stop_.load()) return;
      drain(claim_.load() >> 32);
    }
  }

  std::vector<std::thread> workers_;
  std::atomic<bool> busy_{false};
  std::atomic<uint64_t> claim_{0};
  std::atomic<const std::function<void(size_t)>*> task_{nullptr};
  std::atomic<size_t> tasks_{0};
  std::atomic<size_t> done_{0};
  std::atomic<uint64_t> wake_{0};
  std::mutex sleep_mutex_;
  std::condition_variable sleep_;
  std::atomic<bool> stop_{false};
};

// The ops' threads: process-wide like OpenBLAS's (see the header). g_pool is replaced only by
// set_threads, which the header says not to call while ops run.
std::atomic<int> g_threads{1};
std::unique_ptr<Pool> g_pool;

}  // namespace

void set_threads(int threads) {
  GT_REQUIRE(threads >= 1, "threads is {}, must be >= 1", threads);
  if (threads != g_threads.load()) {
    g_pool.reset();
    if (threads > 1) g_pool = std::make_unique<Pool>(threads - 1);
    g_threads.store(threads);
  }
  openblas_set_num_threads(threads);
}

int threads() { return g_threads.load(std::memory_order_relaxed); }

bool flush_denormals() {
#if defined(__SSE2__)
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
#endif
  return flushing_denormals();
}

bool flushing_denormals() {
#if defined(__SSE2__)
  return _MM_GET_FLUSH_ZERO_MODE() == _MM_FLUSH_ZERO_ON &&
         _MM_GET_DENORMALS_ZERO_MODE() == _MM_DENORMALS_ZERO_ON;
#else
  return false;
#endif
}

void parallel_for(size_t tasks, const std::function<void(size_t)>& task) {
  GT_ASSERT(tasks < (uint64_t{1} << 32), "parallel_for: {} tasks", tasks);
  if (tasks == 0) return;
  if (tasks > 1 && g_pool != nullptr && g_pool->run(tasks, task)) return;
  for (size_t i = 0; i < tasks; ++i) task(i);
}

std::string blas_config() {
  const char* config = openblas_get_config();
  return config != nullptr ? config : "OpenBLAS";
}

BlasSingleThreaded::BlasSingleThreaded() : saved_(openblas_get_num_threads()) {
  if (saved_ != 1) openblas_set_num_threads(1);
}

BlasSingleThreaded::~BlasSingleThreaded() {
  if (saved_ != 1) openblas_set_num_threads(saved_);
}

}  // namespace geotrain::kernels::cpu
