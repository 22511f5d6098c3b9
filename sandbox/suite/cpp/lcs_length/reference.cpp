#include <vector>

void reference(const int* a, const int* b, int* out, int n, int m) {
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1, 0));
  for (int i = 1; i <= n; ++i)
    for (int j = 1; j <= m; ++j)
      d[i][j] = a[i - 1] == b[j - 1] ? d[i - 1][j - 1] + 1 : (d[i - 1][j] > d[i][j - 1] ? d[i - 1][j] : d[i][j - 1]);
  out[0] = d[n][m];
}
