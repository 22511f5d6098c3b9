void solve(const int* x, int* rank, int n) {
  for (int i = 0; i < n; ++i) {
    int r = 0;
    for (int j = 0; j < n; ++j)
      if (x[j] < x[i]) ++r;
    rank[i] = r;
  }
}
