#include <algorithm>
#include <cmath>

void solve(const double* x, double* y, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const double* xr = x + r * cols;
    double* yr = y + r * cols;
    double m = *std::max_element(xr, xr + cols);
    double s = 0.0;
    for (int c = 0; c < cols; ++c) {
      yr[c] = std::exp(xr[c]);
      s += yr[c];
    }
    for (int c = 0; c < cols; ++c) yr[c] /= s;
  }
}
