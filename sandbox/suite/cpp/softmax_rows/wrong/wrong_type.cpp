#include <algorithm>
#include <cmath>

void solve(const double* x, double* y, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const double* xr = x + r * cols;
    double* yr = y + r * cols;
    double m = *std::max_element(xr, xr + cols);
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) {
      yr[c] = std::exp((float)(xr[c] - m));
      s += yr[c];
    }
    for (int c = 0; c < cols; ++c) yr[c] /= s;
  }
}
