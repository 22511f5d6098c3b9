#include <algorithm>

void solve(const int* x, int* best, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const int* row = x + r * cols;
    signed char cur = row[0], b = row[0];
    for (int c = 1; c < cols; ++c) {
      cur = std::max(row[c], cur + row[c]);
      b = std::max<signed char>(b, cur);
    }
    best[r] = b;
  }
}
