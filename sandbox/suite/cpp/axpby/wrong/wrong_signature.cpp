void solve(const float* x, const float* y, float* z, float alpha, float beta, int n) {
  for (int i = 0; i < n; ++i) z[i] = alpha * x[i] + beta * y[i];
}
