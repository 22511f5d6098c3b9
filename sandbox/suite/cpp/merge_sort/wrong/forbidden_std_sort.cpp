#include <algorithm>

void solve(const float* x, float* y, int n) {
  std::copy(x, x + n, y);
  std::sort(y, y + n);
}
