#include <vector>

void solve(const int* x, int* rank, int n) {
  // Counting-sort positions: values are small non-negative ints.
  int maxv = 0;
  for (int i = 0; i < n; ++i)
    if (x[i] > maxv) maxv = x[i];
  std::vector<int> start(maxv + 2, 0);
  for (int i = 0; i < n; ++i) ++start[x[i] + 1];
  for (int v = 1; v <= maxv + 1; ++v) start[v] += start[v - 1];
  for (int i = 0; i < n; ++i) rank[i] = start[x[i]]++;
}
