void reference(const double* x, double* y, int n, int w) {
  for (int i = 0; i < n; ++i) {
    int lo = i - w + 1 < 0 ? 0 : i - w + 1;
    double s = 0.0;
    for (int j = lo; j <= i; ++j) s += x[j];
    y[i] = s / (i - lo + 1);
  }
}
