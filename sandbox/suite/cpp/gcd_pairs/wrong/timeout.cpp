void solve(const int* a, const int* b, int* g, int n) {
  for (int i = 0; i < n; ++i) {
    int x = a[i], y = b[i];
    while (x != y) {
      if (x > y) x -= y;
      else y -= x;
    }
    g[i] = x;
  }
}
