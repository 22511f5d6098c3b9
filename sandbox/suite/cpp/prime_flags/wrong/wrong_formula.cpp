void solve(const int* x, int* is_prime, int n) {
  for (int i = 0; i < n; ++i) {
    int v = x[i];
    int p = v >= 2;
    for (int d = 3; d * d <= v; d += 2)
      if (v % d == 0) {
        p = 0;
        break;
      }
    is_prime[i] = p;
  }
}
