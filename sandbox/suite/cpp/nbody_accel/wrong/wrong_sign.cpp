#include <cmath>

void solve(const double* pos, const double* mass, double* acc, int n, double eps) {
  const double eps2 = eps * eps;
  for (int i = 0; i < n; ++i) {
    double ax = 0.0, ay = 0.0, az = 0.0;
    const double xi = pos[3 * i], yi = pos[3 * i + 1], zi = pos[3 * i + 2];
    for (int j = 0; j < n; ++j) {
      if (j == i) continue;
      double dx = xi - pos[3 * j], dy = yi - pos[3 * j + 1], dz = zi - pos[3 * j + 2];
      double r2 = dx * dx + dy * dy + dz * dz + eps2;
      double inv_r3 = 1.0 / (r2 * std::sqrt(r2));
      double f = mass[j] * inv_r3;
      ax += f * dx;
      ay += f * dy;
      az += f * dz;
    }
    acc[3 * i] = ax;
    acc[3 * i + 1] = ay;
    acc[3 * i + 2] = az;
  }
}
