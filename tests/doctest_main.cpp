#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <dirent.h>
#include <dlfcn.h>
#include <doctest/doctest.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

// A suite that hangs is killed by ctest at its TIMEOUT, and its output says nothing of where it
// hung. The watchdog knows: given GEOTRAIN_TEST_DEADLINE_S (set by geotrain_add_suite a little
// under the suite's TIMEOUT), it names the test case running when the deadline passes and how long
// that case has run, prints every thread's stack, then aborts the suite.
namespace {

using Clock = std::chrono::steady_clock;

// One stack at a time: the watchdog signals a thread and waits for it to fill this in.
void* frames[64];
std::atomic<int> frame_count{-1};

void capture_stack(int) { frame_count.store(backtrace(frames, 64)); }

// "function at file:line" for the executable's own frames (addr2line reads its symbol table, static
// functions included); "library(symbol+offset)" for the others.
void print_frames(void* const* stack, int n) {
  std::string offsets;
  for (int i = 0; i < n; ++i) {
    Dl_info info{};
    if (dladdr(stack[i], &info) != 0 && std::strcmp(info.dli_fname, program_invocation_name) == 0) {
      char hex[32];
      std::snprintf(hex, sizeof hex, " %#lx",
                    static_cast<unsigned long>(static_cast<char*>(stack[i]) -
                                               static_cast<char*>(info.dli_fbase)));
      offsets += hex;
    }
  }
  char** symbols = backtrace_symbols(stack, n);
  for (int i = 0; i < n && symbols != nullptr; ++i) std::fprintf(stderr, "  %s\n", symbols[i]);
  std::free(symbols);
  if (offsets.empty()) return;
  std::fflush(stderr);
  const std::string command =
      "addr2line -f -C -p -e /proc/" + std::to_string(getpid()) + "/exe" + offsets + " 1>&2";
  (void)!std::system(command.c_str());
}

// Every thread of the process but the caller, one after the other (SIGUSR2).
void print_every_stack() {
  struct sigaction action {};
  action.sa_handler = capture_stack;
  sigaction(SIGUSR2, &action, nullptr);
  const long self = syscall(SYS_gettid);
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return;
  while (const dirent* entry = readdir(tasks)) {
    const long tid = std::atol(entry->d_name);
    if (tid <= 0 || tid == self) continue;
    frame_count.store(-1);
    if (syscall(SYS_tgkill, getpid(), tid, SIGUSR2) != 0) continue;
    for (int i = 0; i < 100 && frame_count.load() < 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (frame_count.load() < 0) continue;
    std::fprintf(stderr, "\n[watchdog] the stack of thread %ld:\n", tid);
    print_frames(frames, frame_count.load());
  }
  closedir(tasks);
}

class Watchdog final : public doctest::IReporter {
 public:
  explicit Watchdog(const doctest::ContextOptions&) {}
  ~Watchdog() override {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  void test_run_start() override {
    const char* env = std::getenv("GEOTRAIN_TEST_DEADLINE_S");
    if (env == nullptr || std::atoi(env) <= 0 || thread_.joinable()) return;
    const auto deadline = Clock::now() + std::chrono::seconds(std::atoi(env));
    thread_ = std::thread([this, deadline] { watch(deadline); });
  }
  void test_run_end(const doctest::TestRunStats&) override {
    std::lock_guard lock(mutex_);
    done_ = true;
    wake_.notify_all();
  }
  void test_case_start(const doctest::TestCaseData& tc) override {
    std::lock_guard lock(mutex_);
    name_ =
        std::string(tc.m_name) + " (" + tc.m_file.c_str() + ":" + std::to_string(tc.m_line) + ")";
    started_ = Clock::now();
  }
  void test_case_end(const doctest::CurrentTestCaseStats&) override {
    std::lock_guard lock(mutex_);
    name_.clear();
  }
  void report_query(const doctest::QueryData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}

 private:
  void watch(Clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    if (wake_.wait_until(lock, deadline, [this] { return done_; })) return;
    const auto ran = std::chrono::duration<double>(Clock::now() - started_).count();
    const std::string name = name_.empty() ? "no test case (between cases)" : name_;
    // Unlocked before the abort: doctest's SIGABRT handler ends the test case through us.
    lock.unlock();
    std::fprintf(stderr,
                 "\n[watchdog] the suite reached GEOTRAIN_TEST_DEADLINE_S while running: %s, for "
                 "%.1f s; aborting\n",
                 name.c_str(), ran);
    std::fflush(stderr);
    print_every_stack();
    std::abort();
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread thread_;
  std::string name_;
  Clock::time_point started_ = Clock::now();
  bool done_ = false;
};

}  // namespace

REGISTER_LISTENER("watchdog", 1, Watchdog);
