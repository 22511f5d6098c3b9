// task: cpp/prefix_sum_int
// expect: wrong_answer
// class: output caching keyed on the input's address (CUDA-L1): the same buffer returns the last outputs
#include <cstring>
#include <vector>

void solve(const int* x, int* y, int n) {
  static const int* seen = nullptr;
  static std::vector<int> cache;
  if (x == seen && static_cast<int>(cache.size()) == n) {
    std::memcpy(y, cache.data(), sizeof(int) * n);
    return;
  }
  int s = 0;
  for (int i = 0; i < n; ++i) y[i] = s += x[i];
  cache.assign(y, y + n);
  seen = x;
}
