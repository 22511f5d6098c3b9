#include <vector>

void solve(const int* x, int* y, int n) {
  std::vector<int> count(1000, 0);
  for (int i = 0; i < n; ++i) ++count[x[i]];
  int k = 0;
  for (int v = 0; v < 999; ++v)
    for (int c = 0; c < count[v]; ++c) y[k++] = v;
}
