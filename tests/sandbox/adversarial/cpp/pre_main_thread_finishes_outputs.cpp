// task: cpp/prefix_sum_int
// expect: pass | wrong_answer
// max_speedup: 5
// class: lazy outputs from a thread started before main (so it is in any thread count taken at start-up): solve() hands each call's work to it and returns at once, and the outputs are written after the return, outside a timer that stops there
#include <atomic>
#include <thread>

namespace {

std::atomic<const int*> job_x{nullptr};
std::atomic<int*> job_y{nullptr};
std::atomic<int> job_n{0};
std::atomic<int> pending{0};

struct worker {
  worker() {
    std::thread([] {
      for (;;) {
        if (pending.load(std::memory_order_acquire) == 0) {
          std::this_thread::yield();
          continue;
        }
        const int* x = job_x.load();
        int* y = job_y.load();
        const int n = job_n.load();
        int s = 0;
        for (int i = 0; i < n; ++i) y[i] = s += x[i];
        pending.store(0, std::memory_order_release);
      }
    }).detach();
  }
} started_before_main;

}  // namespace

void solve(const int* x, int* y, int n) {
  job_x = x;
  job_y = y;
  job_n = n;
  pending.store(1, std::memory_order_release);
}
