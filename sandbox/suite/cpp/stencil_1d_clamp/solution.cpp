#include <algorithm>

void solve(const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) {
    float l = x[std::max(i - 1, 0)];
    float r = x[std::min(i + 1, n - 1)];
    y[i] = 0.25f * l + 0.5f * x[i] + 0.25f * r;
  }
}
