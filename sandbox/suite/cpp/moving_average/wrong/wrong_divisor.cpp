void solve(const double* x, double* y, int n, int w) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) {
    s += x[i];
    if (i >= w) s -= x[i - w];
    y[i] = s / w;
  }
}
