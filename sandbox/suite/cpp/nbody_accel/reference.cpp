#include <cmath>

void reference(const double* pos, const double* mass, double* acc, int n, double eps) {
  for (int i = 0; i < n; ++i) {
    double a[3] = {0.0, 0.0, 0.0};
    for (int j = 0; j < n; ++j) {
      if (j == i) continue;
      double d[3], r2 = eps * eps;
      for (int k = 0; k < 3; ++k) {
        d[k] = pos[3 * j + k] - pos[3 * i + k];
        r2 += d[k] * d[k];
      }
      double f = mass[j] / (r2 * std::sqrt(r2));
      for (int k = 0; k < 3; ++k) a[k] += f * d[k];
    }
    for (int k = 0; k < 3; ++k) acc[3 * i + k] = a[k];
  }
}
