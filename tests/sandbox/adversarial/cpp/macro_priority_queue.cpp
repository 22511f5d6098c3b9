// task: cpp/merge_sort
// expect: forbidden
// class: a forbidden container reached through a macro-built name and a type alias (heap sort by the library)
// feedback: std::priority_queue
#include <functional>
#include <queue>
#include <vector>
#define HEAP(a, b) a##b
template <class T>
using min_heap = std::HEAP(priority, _queue)<T, std::vector<T>, std::greater<T>>;

void solve(const float* x, float* y, int n) {
  min_heap<float> h;
  for (int i = 0; i < n; ++i) h.push(x[i]);
  for (int i = 0; i < n; ++i) {
    y[i] = h.top();
    h.pop();
  }
}
