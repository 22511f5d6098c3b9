#include <algorithm>
#include <numeric>
#include <vector>

void reference(const float* x, float* vals, int* idx, int rows, int cols, int k) {
  std::vector<int> order(cols);
  for (int r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
    for (int j = 0; j < k; ++j) {
      vals[r * k + j] = row[order[j]];
      idx[r * k + j] = order[j];
    }
  }
}
