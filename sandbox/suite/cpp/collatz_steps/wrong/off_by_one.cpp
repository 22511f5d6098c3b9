#include <cstdint>

void solve(const int* x, int* steps, int n) {
  for (int i = 0; i < n; ++i) {
    int64_t v = x[i];
    int count = 1;
    while (v > 1) {
      v = (v & 1) ? 3 * v + 1 : v >> 1;
      ++count;
    }
    steps[i] = count;
  }
}
