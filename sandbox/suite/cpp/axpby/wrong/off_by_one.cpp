void solve(const double* x, const double* y, double* z, double alpha, double beta, int n) {
  for (int i = 1; i < n; ++i) z[i] = alpha * x[i] + beta * y[i];
}
