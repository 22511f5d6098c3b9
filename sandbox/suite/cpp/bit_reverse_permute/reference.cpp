void reference(const double* x, double* out, int n, int logn) {
  for (int i = 0; i < n; ++i) {
    int r = 0;
    for (int b = 0; b < logn; ++b)
      if (i & (1 << b)) r |= 1 << (logn - 1 - b);
    out[r] = x[i];
  }
}
