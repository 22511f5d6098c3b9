void solve(const double* x, const double* y, double* z, double alpha, double beta, int n) {
  for (int i = 0; i < n; ++i) z[i] = alpha * x[i] + y[i];
}
