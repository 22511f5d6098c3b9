void solve(const double* L, const double* b, double* x, int n) {
  for (int i = 0; i < n; ++i) x[i] = b[i];
  // Column-oriented: once x[j] is final, remove its contribution from every later row.
  for (int j = 0; j < n; ++j)
    for (int i = j + 1; i < n; ++i) x[i] -= L[j * n + i] * x[j];
}
