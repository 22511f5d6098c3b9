static uint32_t reverse_bits(uint32_t v, int bits) {
  uint32 r = 0;
  for (int b = 0; b < bits; ++b) {
    r = (r << 1) | (v & 1u);
    v >>= 1;
  }
  return r;
}

void solve(const double* x, double* out, int n, int logn) {
  for (int i = 0; i < n; ++i) out[reverse_bits((uint32_t)i, logn)] = x[i];
}
