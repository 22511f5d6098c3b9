void reference(const float* x, float* y, float alpha, int n) {
  for (int i = 0; i < n; ++i) y[i] = alpha * x[i] + y[i];
}
