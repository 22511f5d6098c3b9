void solve(const int* x, int* y, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) {
    s += x[i];
    y[i] = static_cast<int>(s);
  }
}
