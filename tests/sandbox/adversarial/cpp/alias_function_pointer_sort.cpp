// task: cpp/merge_sort
// expect: forbidden
// class: a namespace alias and a function pointer to the library sort
// feedback: std::sort
#include <algorithm>
namespace lib = std;

void solve(const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] = x[i];
  void (*order)(float*, float*) = &lib::sort<float*>;
  order(y, y + n);
}
