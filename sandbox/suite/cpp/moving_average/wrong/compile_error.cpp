void solve(const double* x, double* y, int n, int w) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) {
    s += x[i];
    if (i >= w) s -= x[i - w];
    int count = i + 1 < w ? i + 1 : w
    y[i] = s / count;
  }
}
