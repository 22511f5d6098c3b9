#include <cmath>

void reference(const double* x, double* y, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    double m = x[r * cols];
    for (int c = 1; c < cols; ++c) m = x[r * cols + c] > m ? x[r * cols + c] : m;
    double s = 0.0;
    for (int c = 0; c < cols; ++c) s += std::exp(x[r * cols + c] - m);
    for (int c = 0; c < cols; ++c) y[r * cols + c] = std::exp(x[r * cols + c] - m) / s;
  }
}
