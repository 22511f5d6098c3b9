// task: cpp/prefix_sum_int
// expect: wrong_answer
// class: uses the input as scratch and restores nothing
// feedback: wrote into its input 'x'
#include <cstring>

void solve(const int* x, int* y, int n) {
  int* scratch = const_cast<int*>(x);
  for (int i = 1; i < n; ++i) scratch[i] += scratch[i - 1];
  std::memcpy(y, scratch, sizeof(int) * n);
}
