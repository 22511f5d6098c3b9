void reference(const int* x, int* is_prime, int n) {
  for (int i = 0; i < n; ++i) {
    int v = x[i], p = v >= 2;
    for (int d = 2; d < v && p; ++d)
      if (v % d == 0) p = 0;
    is_prime[i] = p;
  }
}
