#include <cmath>

void reference(const float* x, float* y, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    double m = xr[0];
    for (int c = 1; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
    double s = 0.0;
    for (int c = 0; c < cols; ++c) s += std::exp(xr[c] - m);
    for (int c = 0; c < cols; ++c) y[r * cols + c] = static_cast<float>(std::exp(xr[c] - m) / s);
  }
}
