#include <cmath>

void reference(const float* x, const float* w, float* y, int rows, int cols, float eps) {
  for (int r = 0; r < rows; ++r) {
    double q = 0.0;
    for (int c = 0; c < cols; ++c) q += (double)x[r * cols + c] * x[r * cols + c];
    double inv = 1.0 / std::sqrt(q / cols + eps);
    for (int c = 0; c < cols; ++c) y[r * cols + c] = static_cast<float>(x[r * cols + c] * inv * w[c]);
  }
}
