void solve(const double* c, const double* x, double* y, int deg, int m) {
  for (int j = 0; j < m; ++j) {
    double acc = c[0];
    for (int k = 1; k <= deg; ++k) acc = acc * x[j] + c[k];
    y[j] = acc;
  }
}
