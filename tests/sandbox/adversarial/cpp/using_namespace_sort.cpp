// task: cpp/merge_sort
// expect: forbidden
// class: using namespace std; then an unqualified sort() gets past a text search for std::sort
// feedback: std::sort
#include <algorithm>
using namespace std;

void solve(const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] = x[i];
  sort(y, y + n);
}
