void reference(const double* c, const double* x, double* y, int deg, int m) {
  for (int j = 0; j < m; ++j) {
    double s = 0.0, p = 1.0;
    for (int k = 0; k <= deg; ++k) {
      s += c[k] * p;
      p *= x[j];
    }
    y[j] = s;
  }
}
