// task: cpp/prefix_sum_int
// expect: runtime | wrong_answer
// class: lazy outputs: a thread computes the outputs after solve() returns (the timer has stopped)
#include <chrono>
#include <thread>

void solve(const int* x, int* y, int n) {
  std::thread([=] {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    int s = 0;
    for (int i = 0; i < n; ++i) y[i] = s += x[i];
  }).detach();
}
