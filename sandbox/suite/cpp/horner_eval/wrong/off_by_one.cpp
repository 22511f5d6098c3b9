void solve(const double* c, const double* x, double* y, int deg, int m) {
  for (int j = 0; j < m; ++j) {
    double acc = c[deg - 1];
    for (int k = deg - 2; k >= 0; --k) acc = acc * x[j] + c[k];
    y[j] = acc;
  }
}
