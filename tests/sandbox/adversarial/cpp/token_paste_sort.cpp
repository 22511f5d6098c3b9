// task: cpp/merge_sort
// expect: forbidden
// class: the forbidden name is built by token pasting, so it never appears in the text
// feedback: std::sort
#include <algorithm>
#define JOIN(a, b) a##b

void solve(const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] = x[i];
  std::JOIN(so, rt)(y, y + n);
}
