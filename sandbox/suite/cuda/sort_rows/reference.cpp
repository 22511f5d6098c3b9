#include <algorithm>

void reference(const float* x, float* y, int rows, int cols) {
  std::copy(x, x + rows * cols, y);
  for (int r = 0; r < rows; ++r) std::sort(y + r * cols, y + (r + 1) * cols);
}
