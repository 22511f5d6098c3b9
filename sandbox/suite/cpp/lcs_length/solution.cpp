#include <algorithm>
#include <vector>

void solve(const int* a, const int* b, int* out, int n, int m) {
  // Two rolling rows of the DP table.
  std::vector<int> prev(m + 1, 0), cur(m + 1, 0);
  for (int i = 1; i <= n; ++i) {
    for (int j = 1; j <= m; ++j) {
      if (a[i - 1] == b[j - 1]) cur[j] = prev[j - 1] + 1;
      else cur[j] = std::max(prev[j], cur[j - 1]);
    }
    std::swap(prev, cur);
  }
  out[0] = prev[m];
}
