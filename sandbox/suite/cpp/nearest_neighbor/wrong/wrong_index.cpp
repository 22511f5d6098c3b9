#include <limits>

void solve(const double* queries, const double* points, int* nn, int q, int p) {
  for (int i = 0; i < q; ++i) {
    const double qx = queries[2 * i], qy = queries[2 * i + 1];
    double best_d = std::numeric_limits<double>::infinity();
    int best = -1;
    for (int j = 0; j < p; ++j) {
      double dx = qx - points[j], dy = qy - points[j + 1];
      double d = dx * dx + dy * dy;  // squared distance orders like the distance
      if (d < best_d) {
        best_d = d;
        best = j;
      }
    }
    nn[i] = best;
  }
}
