void solve(const double* c, const double* x, double* y, int deg, int m) {
  for (int j = 0; j < m; ++j) {
    float acc = c[deg];
    for (int k = deg - 1; k >= 0; --k) acc = acc * (float)x[j] + (float)c[k];
    y[j] = acc;
  }
}
