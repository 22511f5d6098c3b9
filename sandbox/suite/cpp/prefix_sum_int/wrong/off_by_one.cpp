void solve(const int* x, int* y, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) {
    y[i] = s;
    s += x[i];
  }
}
