void solve(const int* a, const int* b, int* g, int n) {
  for (int i = 0; i < n; ++i) {
    int x = a[i], y = b[i];
    while (y != 0) {
      int r = x % y;
      x = y;
      y = r;
    }
    g[i] = x;
  }
}
