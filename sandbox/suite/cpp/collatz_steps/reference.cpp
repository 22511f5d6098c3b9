void reference(const int* x, int* steps, int n) {
  for (int i = 0; i < n; ++i) {
    long long v = x[i];
    int s = 0;
    while (v != 1) {
      v = v % 2 == 0 ? v / 2 : 3 * v + 1;
      ++s;
    }
    steps[i] = s;
  }
}
